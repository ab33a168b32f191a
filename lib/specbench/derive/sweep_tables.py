"""A sweep's tidy tables from its raw records: calls, requests, repetitions and cells, with the
paired γ=0 baseline and the decode-step counts from the counters."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.noise import MAX_FOREIGN_CORES
from specbench.store.runs import TABLE_COLUMNS
from specbench.theory.counters import SpecCounters

__all__ = ["summarize", "KEY", "cell_records", "request_rows", "decode_steps", "tables"]


def summarize(parts: dict[str, dict], max_load: float = 2.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tidy tables from the per-cell records: one row per repetition, one per cell."""
    reps, cells, _ = tables(parts, max_load)
    return reps, cells


KEY = ["workload", "gamma", "batch", "temperature"]

# A cell whose repetitions' means spread by more than this (max − min, percent of their median)
# is flagged unstable: shown in the tables, kept out of the fit of h (specbench.theory.predict).
# Repetitions of a quiet cell agree within about ±10 %.
UNSTABLE_SPREAD_PCT = 20.0


def _spread_pct(values: pd.Series) -> float:
    med = float(values.median())
    return float(100 * (values.max() - values.min()) / med) if med > 0 else np.nan


def cell_records(parts: dict[str, dict]) -> dict[str, dict]:
    """One record per cell. A shared-base unit (a part with ``gammas``: one γ=0 arm timed
    round-robin with every γ>0 arm) becomes one record per γ holding that γ's calls and all of
    the unit's base calls — the base paired with each of its cells, as in a run that timed a
    base per γ; ``base_shared`` marks the copies. A γ that failed in the unit is a failed cell.
    Records of one γ pass through."""
    out = {}
    for key, record in parts.items():
        if "gammas" not in record:
            out[key] = record
            continue
        failed = record.get("failed", {})
        for gamma in record["gammas"]:
            cell = {k: v for k, v in record.items() if k not in ("gammas", "calls", "failed")}
            cell["gamma"] = gamma
            if record["status"] != "ok" or str(gamma) in failed:
                cell.update(status="failed", **failed.get(str(gamma), {}))
            else:
                cell.update(base_shared=True,
                            engine_startup_s=record.get("engine_startup_s", {}).get(str(gamma)),
                            calls=[c for c in record["calls"]
                                   if c["arm"] == "base" or c.get("gamma") == gamma])
            out[f"{key}@{gamma}"] = cell
    return out


def request_rows(parts: dict[str, dict]) -> pd.DataFrame:
    """One row per request per timed call (spec and paired-base arms; a shared base's calls
    once under each of its cells, ``base_shared`` true)."""
    rows = []
    for record in cell_records(parts).values():
        if record.get("status") != "ok":
            continue
        prompt_tokens = {r["id"]: r["prompt_tokens"] for r in record["requests"]}
        for call in record["calls"]:
            alone = len(call["ids"]) == 1  # counters of a one-request call are per request
            counters = call["counters"] or {}
            for j, rid in enumerate(call["ids"]):
                row = {"workload": record["workload"], "gamma": record["gamma"],
                       "batch": record["batch"], "temperature": record.get("temperature", 0.0),
                       "arm": call["arm"], "rep": call["rep"], "call": call["call"],
                       "request": rid, "prompt_tokens": prompt_tokens[rid],
                       "output_tokens": call["output_tokens"][j],
                       "pot_ms": call["pot_ms"][j], "ttft_ms": call["ttft_ms"][j],
                       "output_sha256": call["output_sha256"][j],
                       "foreign_cores": call["foreign_cores"],
                       "base_shared": bool(record.get("base_shared", False))}
                if "window_s" in call:   # runs before decode windows have no such fields
                    row.update(window_ms=1e3 * call["window_s"],
                               window_tokens=call["window_tokens"][j],
                               window_steps=call["window_steps"],
                               overlap_ms=1e3 * call["overlap_s"])
                if alone and call["arm"] == "spec":
                    row.update({k: counters.get(k, 0) for k in
                                ("drafts", "draft_tokens", "accepted_tokens")},
                               accepted_per_pos=counters.get("accepted_per_pos", ""),
                               engine_steps=call["iterations"])
                rows.append(row)
    return pd.DataFrame(rows)


def decode_steps(decoded, drafts, accepted, gamma, engine_steps=None):
    """Decode steps of one request from counters and token counts — never from timing.

    A step emits one token plus the drafts it accepted, so steps = decoded − accepted, where
    decoded = output tokens − 1 (the first token comes from prefill). The max-tokens cut-off
    breaks that by up to γ: vLLM counts the drafts accepted in a request's last step even
    when ``max_tokens`` discards some of them. The exact count is vLLM's own step counter (its
    per-step token histogram) for a request alone in the engine: engine steps − 1 (prefill).
    It is used when it lies inside the bounds the counters allow, [max(drafts, decoded −
    accepted), decoded − accepted + γ]; otherwise (batches, where steps are shared) the lower
    bound is taken, which assumes no accepted draft was cut.
    """
    low = max(drafts, decoded - accepted)
    if engine_steps is not None and not pd.isna(engine_steps):
        exact = int(engine_steps) - 1
        if low <= exact <= decoded - accepted + gamma:
            return exact, True
    return low, False


def tables(parts: dict[str, dict], max_load: float = 2.0):
    """reps.csv, cells.csv and requests.csv of a sweep run, from its parts."""
    requests = request_rows(parts)
    rep_rows, cell_rows = [], []
    for record in cell_records(parts).values():
        key = {"workload": record["workload"], "gamma": record["gamma"],
               "batch": record["batch"], "temperature": record.get("temperature", 0.0)}
        if record["status"] != "ok":
            cell_rows.append({**key, "status": "failed", "error": record["error"], "n_reps": 0})
            continue
        calls = pd.DataFrame(record["calls"])
        for (arm, rep), group in calls.groupby(["arm", "rep"]):
            counters = pd.DataFrame([c or {} for c in group["counters"]])
            rep_rows.append({
                **key, "arm": arm, "rep": rep,
                "pot_ms": float(np.mean([p for ps in group["pot_ms"] for p in ps])),
                "ttft_ms": float(np.median([t for ts in group["ttft_ms"] for t in ts])),
                "decode_s": float(sum(max(d) for d in group["decode_s"])),
                "output_tokens": int(sum(sum(o) for o in group["output_tokens"])),
                "wall_s": float(group["wall_s"].sum()),
                "loadavg_1m": float(group["loadavg_1m"].max()),
                "foreign_cores": float(group["foreign_cores"].max()),
                **{k: int(counters[k].sum()) if k in counters else 0
                   for k in ("drafts", "draft_tokens", "accepted_tokens")},
                "draft_tokens_cumulative": (group["draft_tokens_cumulative"].max()
                                            if arm == "spec" else None)})
        cell_rows.append(_cell_row(key, record, calls, requests))
    cells = pd.DataFrame(cell_rows)
    reps = pd.DataFrame(rep_rows)
    cells = _add_baseline_rows(cells, requests, reps, max_load)
    cells = cells.sort_values(KEY).reset_index(drop=True)
    # With no successful cell the measured columns do not exist yet: the tables still have
    # them (empty), so the run closes and lists every cell's cause.
    reps = reps.reindex(columns=list(dict.fromkeys([*TABLE_COLUMNS["reps.csv"], *reps.columns])))
    cells = cells.reindex(columns=list(dict.fromkeys(
        [*TABLE_COLUMNS["cells.csv"], "error", *cells.columns])))
    return reps, cells, requests


def _spec_counters(calls: pd.DataFrame) -> dict:
    spec = calls[calls["arm"] == "spec"]
    counters = pd.DataFrame([c or {} for c in spec["counters"]])
    out = {k: int(counters[k].sum()) if k in counters else 0
           for k in ("drafts", "draft_tokens", "accepted_tokens")}
    per_pos = [list(map(int, str(c["accepted_per_pos"]).split(";")))
               for c in spec["counters"] if c and str(c.get("accepted_per_pos", "")).strip()]
    width = max((len(p) for p in per_pos), default=0)
    out["accepted_per_pos"] = ";".join(str(sum(p[i] for p in per_pos if i < len(p)))
                                       for i in range(width))
    return out


def _cell_row(key: dict, record: dict, calls: pd.DataFrame, requests: pd.DataFrame) -> dict:
    mine = requests[(requests[KEY] == pd.Series(key)).all(axis=1)]
    spec, base = mine[mine["arm"] == "spec"], mine[mine["arm"] == "base"]
    # A cell's latency: per request the median over repetitions, then the mean over requests
    # (every request has the same weight; 1/(αγ+1) is convex, so requests are predicted one
    # by one and averaged the same way).
    per_request = spec.groupby("request")["pot_ms"].median()
    rep_means = spec.groupby("rep")["pot_ms"].mean()
    counters = _spec_counters(calls)
    totals = SpecCounters(int(counters["drafts"]), int(counters["draft_tokens"]),
                          int(counters["accepted_tokens"]))
    gamma = key["gamma"]
    decoded = int((spec["output_tokens"] - 1).sum())
    steps, exact = _cell_steps(spec, counters, gamma)
    row = {**key, "status": "ok", "error": "", "n_reps": int(spec["rep"].nunique()),
           "n_requests": int(spec["request"].nunique()),
           "requests": " ".join(sorted(spec["request"].unique())),
           "pot_ms": float(per_request.mean()), "pot_ms_min": float(rep_means.min()),
           "pot_ms_max": float(rep_means.max()),
           "rep_spread_pct": _spread_pct(rep_means),
           "unstable": bool(len(rep_means) >= 3 and _spread_pct(rep_means) > UNSTABLE_SPREAD_PCT),
           "ttft_ms": float(spec["ttft_ms"].median()),
           "prompt_tokens": int(round(spec.groupby("request")["prompt_tokens"].first().mean())),
           **counters,
           # Definitions and the zero-draft convention (α = 0, length 1) live on the
           # counters type; draft_tokens = 0 in the table says that nothing was drafted.
           "alpha": totals.acceptance_rate,
           "mean_acceptance_length": totals.mean_acceptance_length,
           "decode_steps": steps, "steps_exact": exact,
           "emitted_per_step": decoded / steps if steps else np.nan,
           "drafting_share": counters["drafts"] / steps if steps and gamma else 0.0,
           "counters_in_line": bool(gamma == 0 or counters["draft_tokens"] == 0 or _in_line(calls)),
           "loadavg_1m": float(calls["loadavg_1m"].max()),
           "foreign_cores": float(calls["foreign_cores"].max()),
           "loaded": bool(calls["foreign_cores"].max() > MAX_FOREIGN_CORES),
           "paired": bool(len(base))}
    row.update(_window_columns(spec, key["batch"]))
    if len(base):
        base_per_request = base.groupby("request")["pot_ms"].median()
        row["base_pot_ms"] = float(base_per_request.mean())
        row["speedup"] = row["base_pot_ms"] / row["pot_ms"]
        row["outputs_equal"], row["first_mismatch"] = _equal(record, key["temperature"])
    return row


def _window_columns(spec: pd.DataFrame, batch: int) -> dict:
    """A batch-N cell's decode-window columns (:mod:`specbench.measure.window`): the tokens per
    step inside the windows — the harmonic mean over its requests and repetitions, because the
    cell's latency is the mean of window_s / tokens — and the overlap the windows left out."""
    if batch == 1:
        return {}
    if "window_steps" not in spec or spec["window_steps"].isna().any() or \
            (spec["window_tokens"] <= 0).any():
        return {"overlap_removed": False}
    return {"overlap_removed": True,
            "window_divisor": float(1 / (spec["window_steps"] / spec["window_tokens"]).mean()),
            "window_steps": int(spec["window_steps"].sum()),
            "overlap_ms": float(spec["overlap_ms"].median())}


def _cell_steps(spec: pd.DataFrame, counters: dict, gamma: int) -> tuple[int, bool]:
    """Decode steps summed over the cell's requests (first repetition of each; greedy
    repetitions repeat exactly, and the counters are summed the same way)."""
    if "engine_steps" in spec and spec["drafts"].notna().all():
        total, exact = 0, True
        for _, r in spec.iterrows():
            n, ok = decode_steps(r["output_tokens"] - 1, int(r["drafts"]),
                                 int(r["accepted_tokens"]), gamma, r.get("engine_steps"))
            total, exact = total + n, exact and ok
        return total, exact
    decoded = int((spec["output_tokens"] - 1).sum())
    n, _ = decode_steps(decoded, counters["drafts"], counters["accepted_tokens"], gamma)
    return n, False


def _in_line(calls: pd.DataFrame) -> bool:
    # Deltas of a deterministic greedy cell repeat exactly; the cumulative readings that
    # bound them must still advance with every call.
    cumulative = calls[calls["arm"] == "spec"]["draft_tokens_cumulative"]
    return bool(cumulative.is_monotonic_increasing and cumulative.nunique() == len(cumulative))


def _equal(record: dict, temperature: float):
    """Greedy equality of the spec outputs with the paired base outputs, request by request."""
    if temperature:
        return pd.NA, pd.NA
    calls = [c for c in record["calls"] if c["rep"] == 0]
    # Outputs exist only where the run stored them; elsewhere None stands in for each.
    base = {i: (h, o) for c in calls if c["arm"] == "base"
            for i, h, o in zip(c["ids"], c["output_sha256"], c.get("outputs") or [None] * 9999,
                               strict=False)}
    first, equal = None, True
    for c in calls:
        if c["arm"] != "spec":
            continue
        for i, h, o in zip(c["ids"], c["output_sha256"], c.get("outputs") or [None] * 9999,
                           strict=False):
            if h == base[i][0]:
                continue
            equal = False
            if o is not None and base[i][1] is not None:
                _, where = _compare([base[i][1]], [o])
                first = where if first is None else min(first, where)
    return equal, first


def _add_baseline_rows(cells: pd.DataFrame, requests: pd.DataFrame, reps: pd.DataFrame,
                       max_load: float) -> pd.DataFrame:
    """γ=0 rows from the paired base calls (all γ arms pooled), where no γ=0 cell was measured
    on its own; and the speedup of unpaired cells against their γ=0 cell."""
    if cells.empty or "status" not in cells:
        return cells
    for col in ("speedup", "base_pot_ms", "outputs_equal", "first_mismatch"):
        if col not in cells:
            cells[col] = np.nan if col in ("speedup", "base_pot_ms") else pd.NA
    rows = []
    base = requests[requests["arm"] == "base"] if len(requests) else requests
    for k, group in (base.groupby(KEY[:1] + KEY[2:]) if len(base) else []):
        w, b, t = k
        if group["base_shared"].eq(True).all():
            # One shared base arm, copied under each of its cells: count its calls once.
            group = group.drop_duplicates(["request", "rep", "call"])
        have = cells[(cells["workload"] == w) & (cells["batch"] == b)
                     & (cells["temperature"] == t) & (cells["gamma"] == 0)]
        if len(have):
            continue
        per_request = group.groupby("request")["pot_ms"].median()
        rep_means = group.groupby(["gamma", "rep"])["pot_ms"].mean()
        rows.append({"workload": w, "gamma": 0, "batch": b, "temperature": t, "status": "ok",
                     "error": "", "n_reps": int(len(rep_means)),
                     "n_requests": int(per_request.size),
                     "requests": " ".join(sorted(per_request.index)),
                     "pot_ms": float(per_request.mean()), "pot_ms_min": float(rep_means.min()),
                     "pot_ms_max": float(rep_means.max()),
                     "ttft_ms": float(group["ttft_ms"].median()),
                     "prompt_tokens": int(round(
                         group.groupby("request")["prompt_tokens"].first().mean())),
                     "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0,
                     "accepted_per_pos": "", "alpha": 0.0, "mean_acceptance_length": 1.0,
                     "decode_steps": int((group[group["rep"] == 0].drop_duplicates("request")
                                          ["output_tokens"] - 1).sum()),
                     "steps_exact": True, "emitted_per_step": 1.0, "drafting_share": 0.0,
                     "counters_in_line": True, "foreign_cores": float(group["foreign_cores"].max()),
                     "loaded": bool(group["foreign_cores"].max() > MAX_FOREIGN_CORES),
                     "paired": True, "base_pot_ms": float(per_request.mean()), "speedup": 1.0,
                     "outputs_equal": pd.NA, "first_mismatch": pd.NA,
                     "loadavg_1m": np.nan})
    cells = pd.concat([cells, pd.DataFrame(rows)], ignore_index=True) if rows else cells
    # Unpaired cells: speedup against the γ=0 cell of the same workload, batch, temperature.
    for _, group in cells.groupby(["workload", "batch", "temperature"]):
        zero = group[(group["gamma"] == 0) & (group["status"] == "ok")]
        if zero.empty:
            continue
        for i in group.index:
            if cells.at[i, "status"] == "ok" and pd.isna(cells.at[i, "speedup"]):
                cells.at[i, "base_pot_ms"] = zero["pot_ms"].iloc[0]
                cells.at[i, "speedup"] = zero["pot_ms"].iloc[0] / cells.at[i, "pot_ms"]
    return cells


def _compare(reference: list[list[int]], other: list[list[int]]) -> tuple[bool, int | None]:
    """Token-for-token equality of two batches; the first differing position if any (where one
    output is a prefix of the other, the shorter one's length)."""
    first = None
    for ref, out in zip(reference, other, strict=True):
        pos = next((i for i, (a, b) in enumerate(zip(ref, out, strict=False)) if a != b),
                   None if len(ref) == len(out) else min(len(ref), len(out)))
        if pos is not None:
            first = pos if first is None else min(first, pos)
    return first is None, first
