"""The serving chapter's numbers (book/serving.md), read from a ``serving`` run.

The chapter module :mod:`specbench.report.chapters.serving` returns every number and data-dependent sentence the
chapter glues, with the run id they came from; the tables the chapter shows are built here too,
so the chapter is prose plus one-line calls.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.store.runs import Run

__all__ = ["latest_run", "itl_goodput_table", "sweep_comparison"]


def latest_run(root=None) -> Run:
    """The most recent complete serving run in the store."""
    from specbench.store.runs import DEFAULT_ROOT, load_runs
    runs = load_runs(root or DEFAULT_ROOT, kind="serving")
    if not runs:
        raise FileNotFoundError(f"no complete serving run under {root or DEFAULT_ROOT}/ — run "
                                "`make serving`")
    return runs[-1]


def itl_goodput_table(levels: pd.DataFrame) -> pd.DataFrame:
    """p95 ITL, p95 TPOT and goodput per workload, γ and concurrency (closed loop)."""
    closed = levels[levels["mode"] == "concurrency"]
    table = closed.pivot_table(index=["workload", "concurrency"], columns="gamma",
                               values=["p95_itl_ms", "p95_tpot_ms", "goodput"])
    table.columns = [f"{name.replace('_ms', ' (ms)').replace('_', ' ')} γ={g}"
                     for name, g in table.columns]
    return table


def sweep_comparison(levels: pd.DataFrame, speed: pd.DataFrame,
                     sweep_cells: pd.DataFrame | None) -> pd.DataFrame:
    """Serving speedup at each level beside the offline sweep's speedup at the server's mean
    running batch (linear in batch between the sweep's batch sizes, clipped to their range)."""
    if sweep_cells is None or sweep_cells.empty:
        return pd.DataFrame()
    if "temperature" in sweep_cells:   # the server is loaded greedily
        sweep_cells = sweep_cells[sweep_cells["temperature"] == 0]
    rows = []
    closed = levels[(levels["mode"] == "concurrency") & (levels["gamma"] > 0)]
    for _, level in closed.iterrows():
        cells = sweep_cells[(sweep_cells["workload"] == level["workload"])
                            & (sweep_cells["gamma"] == level["gamma"])].sort_values("batch")
        match = speed[(speed["workload"] == level["workload"]) & (speed["gamma"] == level["gamma"])
                      & (speed["concurrency"] == level["concurrency"])]
        if cells.empty or match.empty:
            continue
        batch = float(level["mean_running"])
        rows.append({"workload": level["workload"], "gamma": int(level["gamma"]),
                     "concurrency": int(level["concurrency"]), "mean_running_batch": batch,
                     "serving_speedup": float(match["speedup"].iloc[0]),
                     "sweep_speedup_at_batch": float(np.interp(batch, cells["batch"],
                                                               cells["speedup"])),
                     "sweep_batches": ",".join(str(int(b)) for b in cells["batch"])})
    return pd.DataFrame(rows)


