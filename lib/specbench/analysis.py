"""From runs to the paper's quantities: predictions, errors and residuals per cell.

Every input is independent of the latency being predicted: t_base is the γ=0 cell of the
same run, workload and batch; α comes from the engine's counters; d(γ) from the frozen
roofline with the model shape and hardware ceilings recorded in the run's manifest.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from . import model
from .roofline import ModelShape, Sku, verify_overhead
from .runs import DEFAULT_ROOT, Run, RunSchemaError, load_runs

__all__ = ["sweep_cells", "predict", "accuracy_table", "headline", "manifest_table"]


def _sku_label(run: Run) -> str:
    hw = run.manifest["hardware"]
    if hw.get("gpus"):
        return hw["gpus"][0]["name"].replace("NVIDIA ", "")
    return f"CPU {hw.get('threads', '?')}t {run.manifest.get('dtype', '')}"


def latest_per_sku(runs: list[Run]) -> list[Run]:
    """The most recent run of each SKU (older runs stay in the store and in the manifest
    table, superseded)."""
    latest: dict[str, Run] = {}
    for run in runs:  # oldest first
        latest[run.sku] = run
    return list(latest.values())


def sweep_cells(root=DEFAULT_ROOT, all_runs: bool = False) -> pd.DataFrame:
    """The cells of the latest complete sweep of every SKU (of every run with ``all_runs``),
    with run, SKU and model columns and the predictions of :func:`predict`."""
    frames = []
    runs = load_runs(root, kind="sweep")
    for run in runs if all_runs else latest_per_sku(runs):
        cells = run.table("cells.csv")
        cells = cells[cells["status"] == "ok"].copy()
        if cells.empty:  # every cell failed: nothing to predict, and nothing silently drawn
            warnings.warn(f"{run.path}: no successful cell (causes in cells.csv, column "
                          "'error'); run skipped", stacklevel=2)
            continue
        _check_reps_match_cells(run, cells)
        cells.insert(0, "run_id", run.run_id)
        cells.insert(1, "sku", run.sku)
        cells.insert(2, "sku_label", _sku_label(run))
        cells.insert(3, "model", run.manifest["model"]["name"])
        frames.append(predict(cells, run))
    if not frames:
        raise FileNotFoundError(f"no complete sweep run with a successful cell under {root}/ "
                                "— run `specbench sweep`")
    return pd.concat(frames, ignore_index=True)


def _check_reps_match_cells(run: Run, cells: pd.DataFrame) -> None:
    """Each successful cell's repetitions are all in reps.csv: a table that lost rows (cut at
    a line end, which no parser notices) is refused instead of read as a shorter one."""
    counts = run.table("reps.csv").groupby(["workload", "gamma", "batch"]).size()
    for cell in cells.itertuples():
        have = int(counts.get((cell.workload, cell.gamma, cell.batch), 0))
        if have != int(cell.n_reps):
            raise RunSchemaError(
                f"{run.path / 'reps.csv'}: {have} rows for γ={cell.gamma} {cell.workload} "
                f"b{cell.batch}, but cells.csv says n_reps={int(cell.n_reps)} (truncated or out "
                "of step with cells.csv)")


def _verify_overheads(cells: pd.DataFrame, run: Run) -> pd.Series:
    shape, sku = run.manifest.get("model_shape"), run.manifest.get("roofline_sku")
    if not shape or not sku:
        return pd.Series(np.nan, index=cells.index)
    shape, sku = ModelShape(**shape), Sku(**sku)
    context = int(cells["prompt_tokens"].mean() + run.manifest["grid"]["max_tokens"] / 2)
    return pd.Series([verify_overhead(shape, sku, int(g), int(b), context)
                      for g, b in zip(cells["gamma"], cells["batch"])], index=cells.index)


def predict(cells: pd.DataFrame, run: Run) -> pd.DataFrame:
    """Add t_base, d(γ), eq. 1, the acceptance-blind rival, errors and residuals."""
    cells = cells.copy()
    base = cells[cells["gamma"] == 0].set_index(["workload", "batch"])["pot_ms"]
    cells["t_base_ms"] = [base.get((w, b), np.nan) for w, b in zip(cells["workload"], cells["batch"])]
    cells["d"] = _verify_overheads(cells, run)
    d = cells["d"].fillna(0.0)
    cells["pred_eq1_ms"] = model.per_token_latency(cells["t_base_ms"], cells["alpha"],
                                                   cells["gamma"], d)
    cells["pred_blind_ms"] = model.device_pass_latency(cells["t_base_ms"], cells["gamma"])
    # The exact divisor from counters and token counts: tokens emitted per decode step.
    cells["pred_exact_ms"] = cells["t_base_ms"] * (1 + d) / cells["tokens_per_step"]
    cells["err_eq1_pct"] = model.cell_errors(cells["pred_eq1_ms"], cells["pot_ms"])
    cells["err_blind_pct"] = model.cell_errors(cells["pred_blind_ms"], cells["pot_ms"])
    cells["pred_speedup"] = model.speedup(cells["alpha"], cells["gamma"], d)
    spec = cells["gamma"] > 0
    cells["alpha_timing"] = np.nan
    cells.loc[spec, "alpha_timing"] = model.alpha_from_timing(
        cells.loc[spec, "pot_ms"], cells.loc[spec, "t_base_ms"], cells.loc[spec, "gamma"],
        d[spec])
    # Per-cycle host residual: measured cycle time minus what eq. 1 charges a cycle.
    cycle_ms = cells["pot_ms"] * (cells["alpha"] * cells["gamma"] + 1)
    cells["cycle_ms"] = cycle_ms
    cells["residual_ms"] = cycle_ms - cells["t_base_ms"] * (1 + d)
    return cells


def accuracy_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Table 1: per workload (and overall), MAPE and max error of both models, γ>0 cells."""
    spec = cells[cells["gamma"] > 0]

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
