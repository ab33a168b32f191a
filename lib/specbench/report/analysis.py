"""From runs to the paper's quantities: predictions, errors and residuals per cell.

Every input is independent of the latency being predicted: t_base is the γ=0 cell of the
same run, workload and batch; α comes from the engine's counters; d(γ) from the frozen
roofline with the model shape and hardware ceilings recorded in the run's manifest.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from specbench.store.load import NOISY_HOST_CV_PCT, repetition_cv_pct
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.theory.roofline import (
    roofline_status,
    shape_from_manifest,
    sku_from_manifest,
    verify_overhead,
)

__all__ = ["sweep_cells", "request_predictors", "accuracy_table", "headline", "manifest_table",
           "roofline_of"]


def _sku_label(run: Run) -> str:
    """A short display name: GPU, or CPU generation + threads + dtype. Runs recorded before
    the CPU family was stored say so, since one marketing name covers several generations."""
    hw = run.manifest["hardware"]
    if hw.get("gpus"):
        label = hw["gpus"][0]["name"].replace("NVIDIA ", "")
    else:
        family = hw.get("cpu_family")
        generation = (_amd_generation(family, hw.get("cpu_model_number"))
                      if family is not None else "earlier machine")
        label = f"CPU {generation} {hw.get('threads', '?')}t {run.manifest.get('dtype', '')}"
    if run.manifest.get("engine", {}).get("name") == "transformers":
        label += " transformers"   # a SKU is hardware × engine
    # A SKU without a roofline says so wherever it appears (its roofline d(γ) is empty).
    return label + (" (no roofline)" if roofline_of(run).startswith("no roofline") else "")


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
    return f"family {family}"


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
                      for g, b in zip(cells["gamma"], cells["batch"])], index=cells.index)


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


def _latest_cells(runs: list[Run]) -> pd.DataFrame:
    """Per SKU, the latest cell of each (workload, γ, batch, temperature) across its runs, so
    a Spec-Bench run does not hide the 'repeat'/'open' cells of an earlier one."""
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
        cells.insert(2, "sku_label", _sku_label(run))
        cells.insert(3, "model", run.manifest["model"]["name"])
        # The grid that measured the cell: which SKUs `make book`'s quick sweep alone measured
        # (specbench.report.evaluation.quick_sweep_skus).
        grid = run.manifest.get("grid", {})
        cells["run_workloads"] = ",".join(grid.get("workloads", []))
        cells["run_prompts"] = grid.get("prompts", np.nan)
        cells = _normalise(cells, run)
        cells["t_base_ms"] = _t_base(cells)
        cells["d_roofline"] = _verify_overheads(cells, run)
        cells["roofline"] = roofline_of(run)
        # Which engine build sampled: a temperature cell is evidence only where sampling is
        # lossless (the engine patch; see specbench.report.evaluation.sampled_evidence).
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
    key = ["sku", "workload", "gamma", "batch", "temperature"]
    return every.drop_duplicates(key, keep="last").reset_index(drop=True)


def _host_cv_pct(run: Run) -> float:
    """How noisy the run's host was (specbench.store.load.repetition_cv_pct): as the sweep
    recorded it in its manifest, else (runs before it did) from the run's own tables; NaN for
    a run holding cells.csv alone, as some fixtures do."""
    recorded = run.manifest.get("load", {}).get("repetition_cv_pct")
    if recorded is not None:
        return float(recorded)
    timed = next((n for n in ("requests.csv", "reps.csv") if (run.path / n).exists()), None)
    return repetition_cv_pct(run.table(timed)) if timed else np.nan


def _micro_d(cells: pd.DataFrame, root) -> pd.Series:
    """d from the latest microbenchmark run of each SKU: extra kernel time over t_base (the
    run's id goes into ``cells['d_micro_run']``, so the pages that use d can list it)."""
    from specbench.measure.microbench import latest_verify
    out = pd.Series(np.nan, index=cells.index)
    cells["d_micro_run"] = None
    for sku, verify in latest_verify(root).items():
        cells.loc[cells["sku"] == sku, "d_micro_run"] = verify["run_id"].iloc[0]
        delta = verify.set_index(["batch", "gamma"])["delta_ms"]
        mine = cells["sku"] == sku
        out[mine] = [delta.get((b, g), np.nan) / t for b, g, t in
                     zip(cells.loc[mine, "batch"], cells.loc[mine, "gamma"],
                         cells.loc[mine, "t_base_ms"])]
    return out


def request_predictors(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per request of the batch-1 paired cells: its paired base, divisor and drafting share,
    from the run whose cell :func:`sweep_cells` keeps."""
    from specbench.measure.sweep_tables import decode_steps
    rows = []
    keep = None if cells is None else set(zip(cells["run_id"], cells["workload"],
                                              cells["gamma"], cells["batch"]))
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
            rows.append({"sku": run.sku, "workload": q["workload"], "gamma": q["gamma"],
                         "batch": 1, "temperature": q["temperature"], "request": q["request"],
                         "base_ms": base_ms.get((q["workload"], q["gamma"], q["temperature"],
                                                 q["request"]), np.nan),
                         "divisor": (q["output_tokens"] - 1) / steps,
                         "share": q["drafts"] / steps})
    return pd.DataFrame(rows)


def sweep_cells(root=DEFAULT_ROOT) -> pd.DataFrame:
    """One table of predictions: per SKU, the latest cell of each (workload, γ, batch,
    temperature) across that SKU's sweep runs, with run, SKU and model columns, the measured
    ``pot_ms`` and the headline model's ``model_pot_ms`` with its rivals and ablations
    (:mod:`specbench.theory.predict`). One cell per key and SKU: the cross-fitted h and the
    per-request predictions key on it."""
    from specbench.theory.predict import add_predictions
    cells = _latest_cells(load_runs(root, kind="sweep"))
    if cells.empty:
        raise FileNotFoundError(f"no complete sweep run under {root}/ — run `specbench sweep`")
    cells["divisor_counters"] = cells["emitted_per_step"]
    if "window_divisor" in cells:
        # Batch N with decode windows: tokens per step over the same steps the latency covers.
        cells["divisor_counters"] = cells["window_divisor"].fillna(cells["divisor_counters"])
    if "overlap_removed" not in cells:
        cells["overlap_removed"] = np.nan
    cells["overlap_removed"] = cells["overlap_removed"].where(cells["batch"] > 1, True)
    cells["d_micro"] = _micro_d(cells, root)
    return _paper_columns(add_predictions(cells, request_predictors(root, cells)))


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
            "acceptance-blind MAPE %": group["err_blind_pct"].abs().mean(),
            "acceptance-blind max %": group["err_blind_pct"].abs().max(),
            "eq. 1 MAPE %": group["err_eq1_pct"].abs().mean(),
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


def headline(cells: pd.DataFrame) -> dict:
    """The numbers of the one-minute story, for glue (first SKU in the store)."""
    sku = cells["sku"].iloc[0]
    c = cells[cells["sku"] == sku]
    spec = c[c["gamma"] > 0]
    out = {"sku": c["sku_label"].iloc[0], "gamma_max": int(spec["gamma"].max()),
           "repeat_alpha_min": float(spec[spec["workload"] == "repeat"]["alpha"].min()),
           "open_alpha_max": float(spec[spec["workload"] == "open"]["alpha"].max()),
           "mape_eq1": float(spec["err_eq1_pct"].abs().mean()),
           "mape_blind": float(spec["err_blind_pct"].abs().mean()),
           "d_max_pct": float(100 * spec["d"].max())}
    for b, group in spec.groupby("batch"):
        rep, opn = group[group["workload"] == "repeat"], group[group["workload"] == "open"]
        top = rep.loc[rep["gamma"].idxmax()] if len(rep) else None
        out.update({
            f"b{b}_repeat_speedup_max": float(top["speedup"]) if top is not None else float("nan"),
            f"b{b}_open_speedup_min": float(opn["speedup"].min()),
            f"b{b}_open_speedup_max": float(opn["speedup"].max()),
            f"b{b}_mape_eq1": float(group["err_eq1_pct"].abs().mean()),
            f"b{b}_mape_blind": float(group["err_blind_pct"].abs().mean()),
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
