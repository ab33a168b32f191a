"""The draft-model cells of every host session, with both cost ratios, the per-position α and
each formula's predicted speedup (:mod:`specbench.theory.draft_cost`), and the break-even α.

A 'draft-sweep' run either drafts with a layer-truncated draft (its grid names the draft's
depth; its γ=0 arm is the paired target baseline) or times a draft alone as its own engine at
γ=0 (its manifest's ``draft_alone`` names the draft). Leviathan's c of a cell is the draft
alone's time per token over the paired target baseline's, on the same host session, workload
and batch. d(γ) is the kernel microbenchmark's verify growth of the same host session (the
model's d); none where the session has no microbenchmark.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.store.cache import memoised
from specbench.store.hosts import host_sessions, latest_per_session
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.theory.draft_cost import (
    extended_speedup,
    in_engine_cost,
    per_position_alpha,
    split_draft_cost,
)
from specbench.theory.economics import (
    TABLE3_ALPHAS,
    break_even_alpha,
    cost_per_million,
    net_speedup,
)
from specbench.theory.errors import percent_change, percent_error
from specbench.theory.roofline import shape_from_manifest

__all__ = ["draft_cells", "break_even", "cost_split", "table3", "best_draft", "draft_serving",
           "draft_memory", "engine_of", "ENGINES", "PREDICTORS"]

#: The speedup predictors the chapter compares, column → what it is.
PREDICTORS = {
    "extended": "the model extended: L / (1 + d(γ) + γ·c_engine), c_engine from the other "
                "workloads at the same depth, batch and γ",
    "leviathan": "Leviathan: L / (1 + γ·c), c the draft alone over the target",
    "leviathan_v": "Leviathan with v = d(γ)/γ: L / (1 + γ·c + d(γ))",
    "no_draft_term": "the n-gram model, draft term left out: L / (1 + d(γ))",
}
KEY = ["sku", "host_session", "depth", "workload", "batch"]
#: The engines a draft sweep runs on: vLLM's draft_model proposer, transformers' assisted
#: generation (batch 1; its runs' SKU ids end in '-hf').
ENGINES = ("vllm", "transformers")


def engine_of(run: Run) -> str:
    """'transformers' for a run of transformers' engine, 'vllm' otherwise."""
    return "transformers" if run.manifest["engine"].get("name") == "transformers" else "vllm"


def _ok(run: Run) -> pd.DataFrame:
    cells = run.table("cells.csv")
    return cells[(cells["status"] == "ok") & (cells["temperature"].fillna(0) == 0)]


def _micro_d(runs: list[Run], sessions: dict[str, str]) -> dict:
    """(sku, session) → the latest microbenchmark's verify growth in ms by (batch, γ)."""
    return {key: run.table("verify.csv").set_index(["batch", "gamma"])["delta_ms"]
            for key, run in latest_per_session(runs, sessions).items()}


def _alone(runs: list[Run], sessions: dict[str, str]) -> pd.DataFrame:
    rows = []
    for run in runs:   # the caller's runs are of one engine
        depth = (run.manifest.get("draft_alone") or {}).get("depth")
        if depth is None:
            continue
        cells = _ok(run)
        rows += [{"sku": run.sku, "host_session": sessions[run.run_id], "depth": depth,
                  "workload": c.workload, "batch": c.batch, "draft_pot_ms": c.pot_ms,
                  "alone_run": run.run_id} for c in cells[cells["gamma"] == 0].itertuples()]
    return pd.DataFrame(rows, columns=[*KEY, "draft_pot_ms", "alone_run"])


def _drafting(runs: list[Run], sessions: dict[str, str]) -> pd.DataFrame:
    frames = []
    for run in runs:
        depth = run.manifest["grid"].get("draft_depth")
        if depth is None:
            continue
        draft = run.manifest["engine"].get("draft_model") or {}
        frames.append(_ok(run).assign(sku=run.sku, host_session=sessions[run.run_id],
                                      depth=depth, run_id=run.run_id,
                                      draft_path=draft.get("path")))
    if not frames:
        return pd.DataFrame(columns=[*KEY, "gamma"])
    cells = pd.concat(frames, ignore_index=True)
    key = [*KEY, "gamma"]
    return cells.drop_duplicates(key, keep="last").reset_index(drop=True)


def _held_out_cost(cells: pd.DataFrame) -> pd.Series:
    """Each cell's c_engine as the median of the other workloads' cells of its session,
    depth, batch and γ (a cell never predicts itself; c is not one number per draft: a
    drafting step also pays a part per step, so c per drafted token moves with γ)."""
    group = ["host_session", "depth", "batch", "gamma"]
    return pd.Series([cells.loc[(cells[group] == row[group]).all(axis=1)
                                & (cells.index != i), "c_engine"].median()
                      for i, row in cells.iterrows()], index=cells.index, dtype=float)


def _predictions(spec: pd.DataFrame) -> pd.DataFrame:
    L, g, d = spec["emitted_per_step"], spec["gamma"], spec["d"].fillna(0.0)
    spec["c_engine"] = in_engine_cost(spec["speedup"], L, g, d)
    spec["c_engine_held_out"] = _held_out_cost(spec)
    spec["pred_extended"] = extended_speedup(L, g, d, spec["c_engine_held_out"])
    spec["pred_leviathan"] = extended_speedup(L, g, 0.0, spec["c_leviathan"])
    spec["pred_leviathan_v"] = extended_speedup(L, g, d, spec["c_leviathan"])
    spec["pred_no_draft_term"] = extended_speedup(L, g, d, 0.0)
    for name in PREDICTORS:
        spec[f"err_{name}"] = percent_error(spec[f"pred_{name}"], spec["speedup"])
    return spec


@memoised
def draft_cells(root=DEFAULT_ROOT, engine: str = "vllm") -> pd.DataFrame:
    """One row per speculative draft-model cell (greedy, status ok) of ``engine``'s draft
    sweeps: measured speedup, L (``emitted_per_step``), the counters' α, per-position α, d(γ),
    both cs, each predictor's speedup and percent error, and the draft checkpoint the sweep
    drafted with. Empty when the store holds no such draft sweep. (transformers' cells have no
    microbenchmark of their own: their d(γ) is none, the verify growth left out.)"""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    every = load_runs(root)
    sessions = host_sessions(every)
    drafts = [r for r in every if r.manifest["kind"] == "draft-sweep" and engine_of(r) == engine]
    cells = _drafting(drafts, sessions)
    if cells.empty:
        return cells
    base = cells[cells["gamma"] == 0].set_index(KEY)["pot_ms"].rename("target_pot_ms")
    spec = cells[cells["gamma"] > 0].join(base, on=KEY)
    spec = spec.merge(_alone(drafts, sessions), on=KEY, how="left")
    spec["c_leviathan"] = spec["draft_pot_ms"] / spec["target_pot_ms"]
    micro = _micro_d(every, sessions)
    spec["d"] = [micro[(s, h)].get((b, g), np.nan) / t if (s, h) in micro else np.nan
                 for s, h, b, g, t in zip(spec["sku"], spec["host_session"], spec["batch"],
                                          spec["gamma"], spec["target_pot_ms"], strict=True)]
    spec["alpha_per_position"] = [per_position_alpha(max(float(L), 1.0), int(g))
                                  for L, g in zip(spec["emitted_per_step"], spec["gamma"],
                                                  strict=True)]
    return _predictions(spec.reset_index(drop=True))


def _solve(gamma: int, c: float, v: float) -> float:
    try:
        return break_even_alpha(gamma, c, v)
    except ValueError:
        return np.nan      # no α in [0, 1] breaks even


@memoised
def break_even(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Per session, depth, batch and γ: the per-position α at which each formula breaks even
    (Leviathan's c alone; c with v = d/γ; the in-engine c with v), beside the measured
    per-position α of the cells (their range) and how many cells sped up."""
    cells = draft_cells(root)
    if cells.empty:
        return cells
    rows = []
    for key, g in cells.groupby(["sku", "host_session", "depth", "batch", "gamma"]):
        gamma, c_lev = int(key[-1]), float(g["c_leviathan"].median())
        # A microbenchmark can measure the verify growth a hair below zero at batch 1 (noise
        # around no growth); the worksheet's v is an overhead, at least zero.
        v = max(float(g["d"].fillna(0).median()) / gamma, 0.0)
        c_eng = float(g["c_engine"].median())
        rows.append(dict(zip(["sku", "host_session", "depth", "batch", "gamma"], key,
                             strict=True),
                         c_leviathan=c_lev, c_engine=c_eng, v=v,
                         break_even_leviathan=_solve(gamma, c_lev, 0.0),
                         break_even_leviathan_v=_solve(gamma, c_lev, v),
                         break_even_engine=_solve(gamma, max(c_eng, 0.0), v),
                         alpha_min=float(g["alpha_per_position"].min()),
                         alpha_max=float(g["alpha_per_position"].max()),
                         cells=len(g), faster=int((g["speedup"] > 1).sum())))
    return pd.DataFrame(rows)


def cost_split(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Per session, depth and batch: the drafting part of a step split into a part per
    drafting step and a part per drafted token (:func:`~specbench.theory.draft_cost
    .split_draft_cost` over the median c_engine at each γ), beside the draft alone's c."""
    cells = draft_cells(root)
    rows = []
    for key, g in cells.groupby(["sku", "host_session", "depth", "batch"]):
        per_gamma = g.groupby("gamma")["c_engine"].median()
        if len(per_gamma) < 2:
            continue
        fixed, per_token = split_draft_cost(per_gamma.index, per_gamma.to_numpy())
        rows.append(dict(zip(["sku", "host_session", "depth", "batch"], key, strict=True),
                         per_step=fixed, per_token=per_token, gammas=len(per_gamma),
                         c_leviathan=float(g["c_leviathan"].median())))
    return pd.DataFrame(rows)


def table3(root=DEFAULT_ROOT, k: int = 4, batch: int = 1) -> pd.DataFrame:
    """The worksheet's Table 3 at k proposed tokens with this store's measured costs instead
    of its assumed c = 0.05: Leviathan's net speedup at each α of the worksheet's grid for
    n-gram drafting (c = 0, v = d(k)/k from the draft sessions' microbenchmarks) and for each
    measured draft depth (its median in-engine c over every cell at that k and batch, the same
    v). Rows α; one column per drafter, named with its c. Empty without draft cells at k."""
    cells = draft_cells(root)
    if cells.empty:
        return cells
    here = cells[(cells["gamma"] == k) & (cells["batch"] == batch)]
    if here.empty:
        return pd.DataFrame()
    v = max(float(here["d"].median()) / k, 0.0) if here["d"].notna().any() else 0.0
    columns = {f"n-gram (c 0, v {v:.3f})": [net_speedup(a, k, 0.0, v) for a in TABLE3_ALPHAS]}
    for depth, g in here.groupby("depth"):
        c = max(float(g["c_engine"].median()), 0.0)
        columns[f"depth {int(depth)} (c {c:.2f})"] = [net_speedup(a, k, c, v)
                                                     for a in TABLE3_ALPHAS]
    return pd.DataFrame(columns, index=pd.Index(TABLE3_ALPHAS, name="α"))


def best_draft(root=DEFAULT_ROOT) -> tuple[int, int] | None:
    """(depth, γ) of the draft configuration with the highest median measured speedup over
    every draft cell the store holds (all host sessions, batches and workloads); None without
    draft cells. What `make serving-drafts` serves as 'the better draft'."""
    cells = draft_cells(root)
    if cells.empty:
        return None
    medians = cells.groupby(["depth", "gamma"])["speedup"].median()
    depth, gamma = medians.idxmax()
    return int(depth), int(gamma)


def _drafter(row) -> str:
    depth = getattr(row, "draft_depth", np.nan)
    if row.gamma == 0:
        return "off"
    return f"draft k{int(depth)}" if depth == depth else "n-gram"


# How far the KV capacity a draft took may lie from its share of the layers and still be called
# that share: half a percentage point (a KV block's rounding is far smaller).
LAYER_SHARE_TOLERANCE = 0.005


def _server_kv(run: Run) -> dict[str, dict]:
    """Each arm's KV cache as its server's engine reported it (empty where it did not)."""
    return {s["arm"]: s.get("kv_cache") or {} for s in run.manifest.get("servers", [])}


def _serving_rows(run: Run) -> list[dict]:
    levels = run.table("levels.csv")
    levels = levels[levels["mode"] == "concurrency"]
    economics = run.manifest["economics"]
    price, demand = economics["price_per_replica_hour_usd"], economics["demand_tokens_per_s"]
    kv = _server_kv(run)
    off_tokens = kv.get("off", {}).get("tokens")

    def usd(q: float) -> float:
        # Whole replicas for the demand, as every serving cost in the book
        # (report.serving_economics.add_costs); no qualified token, no price.
        return cost_per_million(1, price, q, demand, demand)[1] if q > 0 else np.nan

    rows = []
    for (workload, level), group in levels.groupby(["workload", "concurrency"]):
        off = group[group["gamma"] == 0]
        off_tpot = float(off["p50_tpot_ms"].iloc[0]) if len(off) else np.nan
        off_usd = usd(float(off["qualified_tokens_per_s"].iloc[0])) if len(off) else np.nan
        for r in group.itertuples():
            q = float(r.qualified_tokens_per_s)
            cost = usd(q)
            tokens = kv.get(r.arm, {}).get("tokens")
            rows.append({
                "run_id": run.run_id, "sku": run.sku, "workload": workload,
                "concurrency": int(level), "arm": r.arm, "drafter": _drafter(r),
                "gamma": int(r.gamma), "tpot_ms": float(r.p50_tpot_ms),
                "speedup": off_tpot / float(r.p50_tpot_ms),
                "alpha": float(r.alpha) if r.gamma else np.nan,
                "slo_met_p95": bool(r.slo_met_p95), "qualified_tokens_per_s": q,
                "usd_per_million": cost, "cost_change_pct": percent_change(cost, off_usd),
                "kv_tokens": tokens,
                "kv_bytes_per_token": kv.get(r.arm, {}).get("bytes_per_token"),
                "kv_capacity_lost": 1 - tokens / off_tokens if tokens and off_tokens
                else np.nan})
    return rows


@memoised
def draft_serving(root=DEFAULT_ROOT) -> pd.DataFrame:
    """One row per arm and closed-loop level of every 'draft-serving' run (`make
    serving-drafts`): median TPOT, speedup over speculation off at that level, the counters'
    α, the SLO at p95, the cost per million SLO-qualified tokens (the run's price and demand)
    and its change over speculation off's at that level (percent; NaN where either is),
    and the KV cache the engine allocated (tokens, bytes per token) with the share of the
    off server's capacity the arm lost. Empty without such a run."""
    rows = [row for run in load_runs(root, kind="draft-serving") for row in _serving_rows(run)]
    return pd.DataFrame(rows, columns=[
        "run_id", "sku", "workload", "concurrency", "arm", "drafter", "gamma", "tpot_ms",
        "speedup", "alpha", "slo_met_p95", "qualified_tokens_per_s", "usd_per_million",
        "cost_change_pct", "kv_tokens", "kv_bytes_per_token", "kv_capacity_lost"])


def draft_memory(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Per 'draft-serving' run and draft depth: the KV cache the engine allocated in the same
    space without and with the draft (tokens and bytes per token, from the servers' own
    ``vllm:cache_config_info``), the share of capacity the draft's layers took, and the
    weights of target and draft (their shapes' weight elements at the run's weight bytes);
    ``layer_share`` is the draft's share of all the layers the engine holds, and
    ``as_layer_share`` whether the capacity lost is that share (within
    :data:`LAYER_SHARE_TOLERANCE`), as it is where every layer keeps the same KV per token."""
    rows = []
    for run in load_runs(root, kind="draft-serving"):
        servers = _server_kv(run)
        shape = shape_from_manifest(run.manifest.get("model_shape"))
        off = servers.get("off", {})
        for arm in run.manifest["grid"]["arms"]:
            depth = arm.get("draft_depth")
            kv = servers.get(arm["name"], {})
            if depth is None or not kv.get("tokens") or not off.get("tokens"):
                continue
            rows.append({
                "run_id": run.run_id, "sku": run.sku, "depth": int(depth),
                "target_layers": shape.layers if shape else np.nan,
                "kv_gib": kv["bytes"] / 2**30, "kv_tokens_off": off["tokens"],
                "kv_tokens_draft": kv["tokens"],
                "kv_capacity_lost": 1 - kv["tokens"] / off["tokens"],
                "kv_bytes_per_token_off": off["bytes_per_token"],
                "kv_bytes_per_token_draft": kv["bytes_per_token"],
                "target_weights_mb": shape.weight_elements() * shape.weight_bytes / 1e6
                if shape else np.nan,
                "draft_weights_mb": shape.weight_elements(int(depth)) * shape.weight_bytes
                / 1e6 if shape else np.nan})
    memory = pd.DataFrame(rows, columns=[
        "run_id", "sku", "depth", "target_layers", "kv_gib", "kv_tokens_off",
        "kv_tokens_draft", "kv_capacity_lost", "kv_bytes_per_token_off",
        "kv_bytes_per_token_draft", "target_weights_mb", "draft_weights_mb"])
    memory["layer_share"] = memory["depth"] / (memory["target_layers"] + memory["depth"])
    memory["as_layer_share"] = ((memory["kv_capacity_lost"] - memory["layer_share"]).abs()
                                < LAYER_SHARE_TOLERANCE)
    return memory
