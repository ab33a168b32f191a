"""The cells where speculation did not pay: per-repetition speedup intervals and their verdicts."""
from __future__ import annotations

import pandas as pd

from specbench.report.plan.from_runs import latest_sweeps, ok_cells
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs

__all__ = ["rep_intervals", "speedup_interval", "negative_cells"]




# -- negative cells ------------------------------------------------------------------------

def rep_intervals(run: Run) -> pd.DataFrame:
    """Per greedy cell and arm: the range of the per-repetition latencies (min, max), from
    reps.csv. Paired runs time a γ=0 ``base`` arm beside every cell's ``spec`` arm; older runs
    have only the spec arm (their γ=0 cells are the baseline)."""
    reps = run.table("reps.csv")
    if "arm" not in reps:
        reps = reps.assign(arm="spec")
    if "temperature" in reps:
        reps = reps[reps["temperature"].fillna(0.0) == 0]
    return reps.groupby(["workload", "gamma", "batch", "arm"])["pot_ms"].agg(
        pot_ms_min="min", pot_ms_max="max", reps="count")


def speedup_interval(iv: pd.DataFrame, workload: str, gamma: int, batch: int):
    """(low, high, reps) of a speculative cell's speedup from the repetitions' extremes, against
    its paired base arm where measured, else the γ=0 cell; None without repetitions."""
    spec = (workload, gamma, batch, "spec")
    base = (workload, gamma, batch, "base")
    if base not in iv.index:
        base = (workload, 0, batch, "spec")
    if spec not in iv.index or base not in iv.index:
        return None
    return (iv.loc[base, "pot_ms_min"] / iv.loc[spec, "pot_ms_max"],
            iv.loc[base, "pot_ms_max"] / iv.loc[spec, "pot_ms_min"], int(iv.loc[spec, "reps"]))


def negative_cells(root=DEFAULT_ROOT, all_runs: bool = True) -> pd.DataFrame:
    """Every measured speculative cell whose speedup interval does not lie wholly above 1.

    The interval brackets the speedup with the repetitions' extremes: from the slowest
    speculative repetition against the fastest baseline one (low) to the fastest against the
    slowest (high). ``did not pay`` — the whole interval is below 1; ``within noise`` — it
    contains 1. Cells whose interval lies above 1 paid and are left out.
    """
    runs = load_runs(root, kind="sweep")
    if not all_runs:
        runs = latest_sweeps(root)
    rows = []
    for run in runs:
        cells, iv = ok_cells(run), rep_intervals(run)
        for _, c in cells[cells["gamma"] > 0].iterrows():
            interval = speedup_interval(iv, c["workload"], int(c["gamma"]), int(c["batch"]))
            if interval is None or interval[0] > 1:
                continue
            low, high, reps = interval
            rows.append({"run_id": run.run_id, "sku": run.sku, "workload": c["workload"],
                         "batch": int(c["batch"]), "gamma": int(c["gamma"]),
                         "alpha": float(c["alpha"]), "speedup": float(c["speedup"]),
                         "low": float(low), "high": float(high),
                         "reps": reps,
                         "taken under load": bool(c.get("loaded", False)),
                         "verdict": "did not pay" if high < 1 else "within noise"})
    columns = ["run_id", "sku", "workload", "batch", "gamma", "alpha", "speedup", "low", "high",
               "reps", "taken under load", "verdict"]
    return pd.DataFrame(rows, columns=columns)
