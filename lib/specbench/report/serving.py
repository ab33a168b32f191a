"""The serving chapter's numbers (book/serving.md), read from a ``serving`` run.

The chapter module :mod:`specbench.report.chapters.serving` returns every number and
data-dependent sentence the chapter glues, with the run id they came from; the tables the
chapter shows are built here too, so the chapter is prose plus one-line calls.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.store.runs import Run

__all__ = ["latest_run", "itl_goodput_table", "sweep_comparison", "tpot_table"]


def latest_run(root=None) -> Run:
    """The most recent complete serving run in the store that checks no plan (a plan's check,
    ``serve-bench --plan``, is the planning chapter's) and is no step-cost probe (one that
    priced a plan's load prediction)."""
    from specbench.store.runs import DEFAULT_ROOT, load_runs
    runs = [r for r in load_runs(root or DEFAULT_ROOT, kind="serving")
            if not r.manifest.get("plan") and not r.manifest.get("step_cost_probe")]
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




# -- the chapter's tables, as a reader reads them ---------------------------------------------

def _flat(table: pd.DataFrame) -> pd.DataFrame:
    """A pivot's index as ordinary columns (a table without an index column); a concurrency
    is a whole number of requests."""
    flat = table.reset_index()
    if "concurrency" in flat:
        flat["concurrency"] = flat["concurrency"].astype(int)
    return flat


def readable_itl_goodput(levels: pd.DataFrame) -> pd.DataFrame:
    return _flat(itl_goodput_table(levels))


def tpot_table(levels: pd.DataFrame) -> pd.DataFrame:
    """p95 time per output token (ms) per workload and concurrency, one column per γ: the
    latency the SLO judges, narrow enough for the page (the wider ITL/goodput table is
    :func:`readable_itl_goodput`)."""
    table = levels[levels["mode"] == "concurrency"].pivot_table(
        index=["workload", "concurrency"], columns="gamma", values="p95_tpot_ms")
    table.columns = [f"p95 TPOT (ms), γ={g}" for g in table.columns]
    return _flat(table)


def cost_table(levels: pd.DataFrame) -> pd.DataFrame:
    """USD per million SLO-qualified tokens per workload, concurrency and γ ("—": no request
    met the SLO, so there is no qualified token to price)."""
    table = levels[levels["mode"] == "concurrency"].pivot_table(
        index=["workload", "concurrency"], columns="gamma", values="cost_per_million_usd")
    table.columns = [f"USD per M qualified, γ={g}" for g in table.columns]
    return _flat(table)


def _bound(value: float, low: bool) -> str:
    if value == -np.inf:
        return "below the lowest level"
    if value == np.inf:
        return "beyond the highest level"
    return f"{value:.1f}" if not pd.isna(value) else "—"


def crossover_table(crossover: pd.DataFrame) -> pd.DataFrame:
    """Where speculation stops paying, with its interval in words where it is open-ended."""
    c = crossover
    return pd.DataFrame({
        "workload": c["workload"], "γ": c["gamma"].astype(int),
        "crossover (concurrency)": [_bound(v, True) for v in c["crossover"]],
        "95 % interval": [f"{_bound(lo, True)} to {_bound(hi, False)}"
                          for lo, hi in zip(c["crossover_lo"], c["crossover_hi"], strict=True)],
        "resamples with a crossover": c["share_with_crossover"].astype(float),
        "verdict": c["verdict"]})


def readable_sweep_comparison(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return table
    return table.rename(columns={
        "gamma": "γ", "mean_running_batch": "mean running batch",
        "serving_speedup": "serving speedup (×)",
        "sweep_speedup_at_batch": "sweep speedup at that batch (×)",
        "sweep_batches": "sweep batches"}).assign(
        **{"sweep batches": lambda t: t["sweep batches"].str.replace(",", " and ")})


def cpu_table(levels: pd.DataFrame) -> pd.DataFrame:
    """Cores each process used per closed-loop level (mean over the level)."""
    names = {"cpu_client_cores": "client", "cpu_api_server_cores": "API server",
             "cpu_engine_core_cores": "engine core", "cpu_worker_cores": "worker"}
    closed = levels[levels["mode"] == "concurrency"]
    out = closed[["workload", "gamma", "concurrency", *names]].rename(
        columns={"gamma": "γ", **{k: f"{v} (cores)" for k, v in names.items()}})
    return out.sort_values(["workload", "concurrency", "γ"]).reset_index(drop=True)


def acceptance_table(levels: pd.DataFrame) -> pd.DataFrame:
    """The client's acceptance beside this project's counters, per speculative level; the
    client's per-position rates as percentages, one column per position."""
    spec = levels[levels["gamma"] > 0].copy()
    out = pd.DataFrame({
        "workload": spec["workload"], "γ": spec["gamma"].astype(int), "mode": spec["mode"],
        "level": np.where(spec["mode"] == "concurrency", spec["concurrency"],
                          spec["request_rate"]),
        "client α": spec["client_acceptance_rate"], "counter α": spec["alpha"],
        "client acceptance length": spec["client_acceptance_length"],
        "counter acceptance length": spec["mean_acceptance_length"]})
    per_pos = spec["client_per_position"].fillna("").astype(str).str.split(";")
    width = max((len([p for p in v if p]) for v in per_pos), default=0)
    for i in range(width):
        out[f"client, position {i + 1} (%)"] = [
            100 * float(v[i]) if i < len(v) and v[i] else np.nan for v in per_pos]
    return out.reset_index(drop=True)
