"""From runs to the paper's quantities: predictions, errors and residuals per cell.

Every input is independent of the latency being predicted: t_base is the γ=0 cell of the
same run, workload and batch; α comes from the engine's counters; d(γ) from the frozen
roofline with the model shape and hardware ceilings recorded in the run's manifest.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from specbench.derive.noise import NOISY_HOST_CV_PCT, repetition_cv_pct
from specbench.derive.sweep_tables import decode_steps
from specbench.store.cache import memoised
from specbench.store.hosts import latest_per_session
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.theory.errors import mape_of
from specbench.theory.roofline import (
    roofline_status,
    shape_from_manifest,
    sku_from_manifest,
    verify_overhead,
)

__all__ = ["sweep_cells", "run_cells", "request_predictors", "accuracy_table",
           "published_quantities", "manifest_table", "roofline_of", "sku_label"]


def sku_label(run: Run) -> str:
    """A short display name a reader can parse: GPU, or CPU generation · dtype · threads
    ("Zen 4 · bf16 · 1 thread"), then the engine where it is not vLLM."""
    hw = run.manifest["hardware"]
    dtype = _SHORT_DTYPE.get(run.manifest.get("dtype", ""), run.manifest.get("dtype", ""))
    if hw.get("gpus"):
        parts = [hw["gpus"][0]["name"].replace("NVIDIA ", ""), dtype]
    else:
        threads = hw.get("threads", "?")
        parts = [_cpu_generation(hw), dtype, f"{threads} thread{'' if threads == 1 else 's'}"]
        if hw.get("cpu_family") is None:
            parts.append(_UNRECORDED_HOST)
    if run.manifest.get("engine", {}).get("name") == "transformers":
        parts.append("transformers")   # a SKU is hardware × engine
    label = " · ".join(p for p in parts if p)
    # A SKU without a roofline says so wherever it appears (its roofline d(γ) is empty).
    return label + (" (no roofline)" if roofline_of(run).startswith("no roofline") else "")


_SHORT_DTYPE = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}

# The first runs predate the manifest's CPU family field. What they did record places them on
# a Zen 4: a one-thread bfloat16 GEMM ceiling of 208 GFLOP/s and 26 GB/s of copy bandwidth (the
# recorded Zen 4's: 210 and 28; the Zen 5's: 463 and 42), native bfloat16, and the guest
# kernel build of the Zen 4 runs. They stay a SKU of their own, labelled as the first such host.
_UNRECORDED_GENERATION = "Zen 4"
_UNRECORDED_HOST = "first host"


def _cpu_generation(hw: dict) -> str:
    family = hw.get("cpu_family")
    if family is None:
        return _UNRECORDED_GENERATION
    return _amd_generation(family, hw.get("cpu_model_number"))


# AMD family 25 (19h) covers Zen 3 and Zen 4; the model number tells them apart (Zen 4: Genoa
# 10h–1Fh, Raphael 60h–6Fh, Phoenix 70h–7Fh, Bergamo A0h–AFh). Family 26 (1Ah) is Zen 5.
# Family 23 (17h) covers Zen 1 (Naples 01h, Raven Ridge 11h), Zen+ (08h, 18h) and, from model
# 30h on (Rome 31h), Zen 2.
_ZEN4_MODELS = [range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0)]
_ZEN_PLUS_MODELS = (0x08, 0x18)


def _amd_generation(family, model) -> str:
    if str(family) == "26":
        return "Zen 5"
    if str(family) == "23":
        try:
            number = int(model)
        except (TypeError, ValueError):
            return "Zen 1/2"
        return ("Zen 2" if number >= 0x30 else "Zen+" if number in _ZEN_PLUS_MODELS
                else "Zen 1")
    if str(family) == "25":
        try:
            number = int(model)
        except (TypeError, ValueError):
            return "Zen 3/4"
        return "Zen 4" if any(number in r for r in _ZEN4_MODELS) else "Zen 3"
    # Another vendor's family spans generations (Intel's family 6 holds every Xeon since
    # 2006): the model number tells two hosts of one family apart.
    return f"family {family}" + (f" model {model}" if model not in (None, "") else "")


def roofline_of(run: Run) -> str:
    """Where a run's d(γ) comes from, or why it has none (the manifest's 'roofline' line)."""
    return roofline_status(run.manifest.get("model_shape"), run.manifest.get("roofline_sku"))


def latest_per_sku(runs: list[Run]) -> list[Run]:
    """The most recent run of each SKU (older runs stay in the store and in the manifest
    table, superseded)."""
    latest: dict[str, Run] = {}
    for run in runs:  # oldest first
        latest[run.sku] = run
    return list(latest.values())


def _verify_overheads(cells: pd.DataFrame, run: Run) -> pd.Series:
    shape = shape_from_manifest(run.manifest.get("model_shape"))
    sku = sku_from_manifest(run.manifest.get("roofline_sku"))
    if shape is None or sku is None:
        # No roofline (unknown GPU or model shape): d(γ) stays missing, and so does every
        # prediction that needs it — never a silent d = 0. The 'roofline' column says why.
        return pd.Series(np.nan, index=cells.index)
    context = int(cells["prompt_tokens"].mean() + run.manifest["grid"]["max_tokens"] / 2)
    return pd.Series([verify_overhead(shape, sku, int(g), int(b), context)
                      for g, b in zip(cells["gamma"], cells["batch"], strict=True)],
                     index=cells.index)


def _normalise(cells: pd.DataFrame, run: Run) -> pd.DataFrame:
    """Cells of any run version in today's columns (older runs lack the newer ones)."""
    c = cells.copy()
    defaults = {"temperature": 0.0, "paired": False, "drafting_share": np.nan,
                "base_pot_ms": np.nan, "n_requests": 1, "steps_exact": False}
    for col, value in defaults.items():
        if col not in c:
            c[col] = value
    c["temperature"] = c["temperature"].fillna(0.0)
    if "decode_steps" not in c:
        # Older runs stored tokens per step; their decoded tokens give the step count back.
        decoded = c["n_reps"] * c["batch"] * (run.manifest["grid"]["max_tokens"] - 1)
        c["decode_steps"] = decoded / c["emitted_per_step"]
    c["drafting_share"] = c["drafting_share"].fillna(
        (c["drafts"] / c["decode_steps"]).where(c["gamma"] > 0, 0.0))
    return c


def _t_base(cells: pd.DataFrame) -> pd.Series:
    """Paired base where measured, else the γ=0 cell of the same run, workload, batch, T."""
    zero = cells[cells["gamma"] == 0].set_index(["run_id", "workload", "batch", "temperature"])
    unpaired = [zero["pot_ms"].get(k, np.nan) for k in
                cells[["run_id", "workload", "batch", "temperature"]].itertuples(index=False)]
    return cells["base_pot_ms"].where(cells["paired"].astype(bool) & cells["base_pot_ms"].notna(),
                                      pd.Series(unpaired, index=cells.index))


def _latest_cells(runs: list[Run], sessions: dict[str, str] | None = None) -> pd.DataFrame:
    """Per SKU and host session, the latest cell of each (workload, γ, batch, temperature)
    across its runs, so a Spec-Bench run does not hide the 'repeat'/'open' cells of an earlier
    one — and never across hosts: two hosts of one CPU kind measured a γ=0 step twofold apart,
    so a cell keeps the t_base, d and step cost of the host that measured it. ``sessions``
    (run id → host session, :func:`specbench.store.hosts.host_sessions`) defaults to the
    sessions of ``runs`` alone."""
    from specbench.store.hosts import host_sessions
    sessions = host_sessions(runs) if sessions is None else sessions
    frames = []
    for run in runs:  # oldest first
        cells = run.table("cells.csv")
        cells = cells[cells["status"] == "ok"].copy()
        if cells.empty:  # every cell failed: nothing to predict, and nothing silently drawn
            warnings.warn(f"{run.path}: no successful cell (causes in cells.csv, column "
                          "'error'); run skipped", stacklevel=3)
            continue
        # Runs before the rename store the measured divisor as tokens_per_step.
        cells = cells.rename(columns={"tokens_per_step": "emitted_per_step"})
        cells.insert(0, "run_id", run.run_id)
        cells.insert(1, "sku", run.sku)
        cells.insert(2, "sku_label", sku_label(run))
        cells.insert(3, "model", run.manifest["model"]["name"])
        cells.insert(4, "host_session", sessions[run.run_id])
        cells["dtype"] = run.manifest.get("dtype")
        # The grid that measured the cell: which SKUs `make book`'s quick sweep alone measured
        # (specbench.derive.evaluation.quick_sweep_skus).
        grid = run.manifest.get("grid", {})
        cells["run_workloads"] = ",".join(grid.get("workloads", []))
        cells["run_prompts"] = grid.get("prompts", np.nan)
        cells = _normalise(cells, run)
        cells["t_base_ms"] = _t_base(cells)
        cells["d_roofline"] = _verify_overheads(cells, run)
        cells["roofline"] = roofline_of(run)
        # Which engine build sampled: a temperature cell is evidence only where sampling is
        # lossless (the engine patch; see specbench.derive.evaluation.sampled_evidence).
        settings = run.manifest.get("engine", {}).get("settings") or {}
        cells["engine_patch"] = settings.get("engine_patch") or "as released"
        # A run whose warmup filled the prefix cache timed no prefill: its TTFT is not one.
        cached = bool(settings.get("enable_prefix_caching", False))
        cells["prefix_cached"] = cached
        if cached:
            cells["ttft_ms"] = np.nan
        cells["host_cv_pct"] = _host_cv_pct(run)
        cells["noisy_host"] = cells["host_cv_pct"] > NOISY_HOST_CV_PCT
        frames.append(cells)
    if not frames:
        return pd.DataFrame()
    every = pd.concat(frames, ignore_index=True)
    key = ["sku", "host_session", "workload", "gamma", "batch", "temperature"]
    return every.drop_duplicates(key, keep="last").reset_index(drop=True)


def _host_cv_pct(run: Run) -> float:
    """How noisy the run's host was (specbench.derive.noise.repetition_cv_pct): as the sweep
    recorded it in its manifest, else (runs before it did) from the run's own tables; NaN for
    a run holding cells.csv alone, as some fixtures do."""
    recorded = run.manifest.get("load", {}).get("repetition_cv_pct")
    if recorded is not None:
        return float(recorded)
    timed = next((n for n in ("requests.csv", "reps.csv") if (run.path / n).exists()), None)
    return repetition_cv_pct(run.table(timed)) if timed else np.nan


def _micro_d(cells: pd.DataFrame, runs: list[Run], sessions: dict[str, str]) -> pd.Series:
    """d from the latest microbenchmark run of each SKU on each host session: extra kernel
    time over t_base (the run's id goes into ``cells['d_micro_run']``, so the pages that use d
    can list it). A host session without one gets none: another host's kernels are not its
    own (the roofline's d stands in; ``d_source`` says so)."""
    out = pd.Series(np.nan, index=cells.index)
    cells["d_micro_run"] = None
    for (sku, session), run in latest_per_session(runs, sessions).items():
        verify = run.table("verify.csv")
        mine = (cells["sku"] == sku) & (cells["host_session"] == session)
        cells.loc[mine, "d_micro_run"] = run.run_id
        delta = verify.set_index(["batch", "gamma"])["delta_ms"]
        out[mine] = [delta.get((b, g), np.nan) / t for b, g, t in
                     zip(cells.loc[mine, "batch"], cells.loc[mine, "gamma"],
                         cells.loc[mine, "t_base_ms"], strict=True)]
    return out


@memoised
def request_predictors(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None,
                       sessions: dict[str, str] | None = None) -> pd.DataFrame:
    """Per request of the batch-1 paired cells: its paired base, divisor and drafting share,
    from the run whose cell :func:`sweep_cells` keeps (every run's without ``cells``), with
    the run, its host session, its dtype and the call's position in the run."""
    return _request_rows(root, cells, sessions)


def _request_rows(root, cells: pd.DataFrame | None, sessions: dict[str, str] | None
                  ) -> pd.DataFrame:
    """:func:`request_predictors`, uncached: :func:`sweep_cells` (itself cached) calls it
    with its own half-built cells, which would only fill the cache with one-off entries."""
    from specbench.store.hosts import host_sessions
    rows = []
    keep = None if cells is None else set(zip(cells["run_id"], cells["workload"],
                                              cells["gamma"], cells["batch"], strict=True))
    sessions = host_sessions(load_runs(root)) if sessions is None else sessions
    for run in load_runs(root, kind="sweep"):
        if not (run.path / "requests.csv").exists():
            continue
        r = run.table("requests.csv")
        r = r[r["batch"] == 1]
        spec, base = r[(r["arm"] == "spec") & (r["gamma"] > 0)], r[r["arm"] == "base"]
        base_ms = base.groupby(["workload", "gamma", "temperature", "request"])["pot_ms"].median()
        first = spec[spec["rep"] == spec["rep"].min()]
        for _, q in first.iterrows():
            if keep is not None and (run.run_id, q["workload"], q["gamma"], 1) not in keep:
                continue
            steps, _ = decode_steps(q["output_tokens"] - 1, int(q["drafts"]),
                                    int(q["accepted_tokens"]), int(q["gamma"]),
                                    q.get("engine_steps"))
            rows.append({"sku": run.sku, "host_session": sessions.get(run.run_id),
                         "run_id": run.run_id, "dtype": run.manifest.get("dtype"),
                         "call": q["call"], "workload": q["workload"], "gamma": q["gamma"],
                         "batch": 1, "temperature": q["temperature"], "request": q["request"],
                         "base_ms": base_ms.get((q["workload"], q["gamma"], q["temperature"],
                                                 q["request"]), np.nan),
                         "divisor": (q["output_tokens"] - 1) / steps,
                         "share": q["drafts"] / steps})
    return pd.DataFrame(rows)


@memoised
def sweep_cells(root=DEFAULT_ROOT, every_session: bool = False) -> pd.DataFrame:
    """One table of predictions: per SKU and host session, the latest cell of each (workload,
    γ, batch, temperature) across that session's sweep runs, with run, SKU, host session and
    model columns, the measured ``pot_ms`` and the headline model's ``model_pot_ms`` with its
    rivals and ablations (:mod:`specbench.theory.predict`). Each cell is predicted from its own
    host session's t_base, d and host term. The book groups by SKU: unless ``every_session``,
    a key measured on several host sessions of one SKU keeps the latest session's cell (after
    the prediction, so nothing of the older host's calibration reaches the newer host's
    cells)."""
    from specbench.store.hosts import host_sessions
    from specbench.theory.predict import add_predictions
    every = load_runs(root)
    sessions = host_sessions(every)
    cells = _latest_cells([r for r in every if r.manifest["kind"] == "sweep"], sessions)
    if cells.empty:
        raise FileNotFoundError(f"no complete sweep run under {root}/ — run `specbench sweep`")
    cells = _with_divisor(cells)
    if "overlap_removed" not in cells:
        cells["overlap_removed"] = np.nan
    cells["overlap_removed"] = cells["overlap_removed"].where(cells["batch"] > 1, True)
    micro = [r for r in every if r.manifest["kind"] == "microbench"]
    cells["d_micro"] = _micro_d(cells, micro, sessions)
    cells = _paper_columns(add_predictions(
        cells, _request_rows(root, cells, sessions)))
    if every_session:
        return cells
    key = ["sku", "workload", "gamma", "batch", "temperature"]
    return cells.drop_duplicates(key, keep="last").reset_index(drop=True)


def _with_divisor(cells: pd.DataFrame) -> pd.DataFrame:
    """Tokens per decode step from the counters, the model's D."""
    cells["divisor_counters"] = cells["emitted_per_step"]
    if "window_divisor" in cells:
        # Batch N with decode windows: tokens per step over the same steps the latency covers.
        cells["divisor_counters"] = cells["window_divisor"].fillna(cells["divisor_counters"])
    return cells


def run_cells(run: Run) -> pd.DataFrame:
    """One sweep run's own successful cells, in :func:`sweep_cells`'s columns up to the
    predictions (paired t_base, counter divisor, drafting share): a calibration, or the cells
    a sealed prediction is judged on — read from that run alone, so no other run moves them."""
    cells = _latest_cells([run])
    return _with_divisor(cells) if len(cells) else cells


def _paper_columns(cells: pd.DataFrame) -> pd.DataFrame:
    """The source paper's own quantities, with its roofline d, beside the headline model. A
    SKU without a roofline gets none of them (never a silent d = 0)."""
    d = cells["d_roofline"]
    spec = cells["gamma"] > 0
    closed = cells["alpha"] * cells["gamma"] + 1
    cells["pred_speedup"] = closed / (1 + d)
    cells["pred_exact_ms"] = cells["t_base_ms"] * (1 + d) / cells["divisor_counters"]
    # Eq. 1 inverted for α (the paper's circular cross-check; see model.alpha_from_timing).
    cells["alpha_timing"] = ((cells["t_base_ms"] * (1 + d) / cells["pot_ms"] - 1)
                             / cells["gamma"]).where(spec)
    # Per-cycle residual: measured cycle time minus what eq. 1 charges a cycle.
    cells["cycle_ms"] = cells["pot_ms"] * cells["divisor_counters"]
    cells["residual_ms"] = cells["cycle_ms"] - cells["t_base_ms"] * (1 + d)
    return cells


def accuracy_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Table 1: per workload (and overall), MAPE and max error of both models, γ>0 cells
    (greedy: temperature cells are not evidence while the engine fails the lossless test)."""
    spec = cells[cells["gamma"] > 0]
    if "temperature" in spec:
        spec = spec[spec["temperature"] == 0]

    def row(group):
        return pd.Series({
            "cells": len(group),
            "counter α": f"{group['alpha'].min():.2f}–{group['alpha'].max():.2f}",
            "acceptance-blind MAPE %": mape_of(group["err_blind_pct"]),
            "acceptance-blind max %": group["err_blind_pct"].abs().max(),
            "eq. 1 MAPE %": mape_of(group["err_eq1_pct"]),
            "eq. 1 max %": group["err_eq1_pct"].abs().max(),
            "eq. 1 mean signed %": group["err_eq1_pct"].mean(),
        })
    by_cell = spec.groupby(["sku_label", "batch", "workload"]).apply(row, include_groups=False)
    by_workload = spec.groupby(["sku_label", "workload"]).apply(row, include_groups=False)
    by_workload.index = pd.MultiIndex.from_tuples([(s, "all", w) for s, w in by_workload.index])
    overall = spec.groupby("sku_label").apply(row, include_groups=False)
    overall.index = pd.MultiIndex.from_tuples([(s, "all", "all") for s in overall.index])
    table = pd.concat([by_cell.rename(index=str, level=1), by_workload, overall])
    table.index.names = ["SKU", "batch", "workload"]
    return table


def published_quantities(cells: pd.DataFrame) -> dict:
    """This project's values of the published quantities (the measured chapter's comparison
    table) on one SKU's cells: its eq. 1 and acceptance-blind MAPE are over that SKU's
    speculative cells, as the paper's are over the cells of its one GPU. The book's own MAPEs,
    over every SKU's evidence, are the accuracy chapter's (``hm_*``); the per-batch ones are
    :func:`specbench.report.curves.mape_by`'s."""
    sku = cells["sku"].iloc[0]
    c = cells[cells["sku"] == sku]
    spec = c[c["gamma"] > 0]
    out = {"sku": c["sku_label"].iloc[0], "gamma_max": int(spec["gamma"].max()),
           "repeat_alpha_min": float(spec[spec["workload"] == "repeat"]["alpha"].min()),
           "open_alpha_max": float(spec[spec["workload"] == "open"]["alpha"].max()),
           "mape_eq1": mape_of(spec["err_eq1_pct"]),
           "mape_blind": mape_of(spec["err_blind_pct"]),
           "d_max_pct": float(100 * spec["d"].max())}
    for b, group in spec.groupby("batch"):
        rep, opn = group[group["workload"] == "repeat"], group[group["workload"] == "open"]
        top = rep.loc[rep["gamma"].idxmax()] if len(rep) else None
        out.update({
            f"b{b}_repeat_speedup_max": float(top["speedup"]) if top is not None else float("nan"),
            f"b{b}_open_speedup_min": float(opn["speedup"].min()),
            f"b{b}_open_speedup_max": float(opn["speedup"].max()),
            f"b{b}_d_max_pct": float(100 * group["d"].max()),
            f"b{b}_t_base_ms": float(c[(c["batch"] == b) & (c["gamma"] == 0)]["pot_ms"].median()),
        })
    # The keys the published-reference table compares (batch 1, as in the paper's headline).
    out.update(repeat_speedup_max=out.get("b1_repeat_speedup_max"),
               open_speedup_min=out.get("b1_open_speedup_min"),
               t_base_ms=out.get("b1_t_base_ms"))
    return out


def manifest_table(runs: list[Run]) -> pd.DataFrame:
    """"Exactly what was measured": one row per run, from its manifest."""
    rows = []
    for run in runs:
        m = run.manifest
        grid = m.get("grid", {})
        rows.append({
            "run": m["run_id"], "kind": m["kind"], "SKU": m["sku"],
            "hardware": (m["hardware"].get("gpus") or [{}])[0].get("name")
                        or m["hardware"].get("cpu_model"),
            "threads": m["hardware"].get("threads"),
            "engine": f"{m['engine']['name']} {m['engine']['version']}",
            "model": m["model"]["name"], "dtype": m.get("dtype"),
            "grid": ", ".join(f"{k}={v}" for k, v in grid.items() if k != "reduced"),
            "code": m["code"]["revision"][:10] + ("+dirty" if m["code"].get("dirty") else ""),
            "started": m["started_at"], "finished": m["finished_at"],
        })
    return pd.DataFrame(rows)
