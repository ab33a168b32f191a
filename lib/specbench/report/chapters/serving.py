"""The serving chapter's numbers: a real server under load, its SLO goodput, cost and crossover."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.report.chapters.base import Numbers
from specbench.report.serving import sweep_comparison
from specbench.report.serving_economics import serving_tables
from specbench.store.runs import Run

__all__ = ["numbers"]


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def numbers(run: Run, sweep_cells: pd.DataFrame | None = None) -> Numbers:
    """Every number and data-dependent sentence of the serving chapter, with the run ids."""
    m = run.manifest
    levels, speed, cross = serving_tables(run)
    closed = levels[levels["mode"] == "concurrency"]
    spec = levels[levels["gamma"] > 0]
    n = {"run_id": run.run_id, "sku": run.sku, "num_prompts": m["load"]["num_prompts"],
         "output_len": m["load"]["output_len"], "slo_ttft_ms": m["slo"]["ttft_ms"],
         "slo_tpot_ms": m["slo"]["tpot_ms"],
         "concurrencies": ", ".join(str(c) for c in m["grid"]["concurrencies"]),
         "max_concurrency": int(closed["concurrency"].max()),
         "request_rates": ", ".join(f"{r:g}" for r in m["grid"]["request_rates"]) or "none",
         "gammas": ", ".join(str(g) for g in m["grid"]["gammas"]),
         "workloads": _join([f"'{w}'" for w in m["grid"]["workloads"]]),
         "n_levels": len(levels), "n_requests": int(levels["completed"].sum()),
         "failed": int(levels["failed"].sum()),
         "dataset_sha": (m["dataset"]["spec_bench_sha256"] or "")[:12],
         "price": m["economics"]["price_per_replica_hour_usd"],
         "demand": m["economics"]["demand_tokens_per_s"]}
    n["max_num_seqs"] = int(m["engine"]["settings"]["max_num_seqs"])
    n["slo_tokens_per_s"] = 1000.0 / n["slo_tpot_ms"]
    from specbench.measure.serving import GPU_SLO
    n["gpu_ttft_ms"], n["gpu_tpot_ms"] = GPU_SLO.ttft_ms, GPU_SLO.tpot_ms
    one = closed[(closed["workload"] == "repeat") & (closed["gamma"] == 0)
                 & (closed["concurrency"] == 1)] if "repeat" in set(closed["workload"]) else \
        closed[(closed["gamma"] == 0) & (closed["concurrency"] == closed["concurrency"].min())]
    reqs = run.table("requests.csv")
    first = reqs[(reqs["workload"] == one["workload"].iloc[0]) & (reqs["gamma"] == 0)
                 & (reqs["mode"] == "concurrency") & (reqs["level"] == one["concurrency"].iloc[0])]
    n["tpot_c1"] = float(first["tpot_ms"].median())
    n["ttft_c1"] = float(first["ttft_ms"].median())
    n["prompt_c1"] = float(first["prompt_len"].mean())
    # The client's acceptance against this project's reader, same window.
    both = spec.dropna(subset=["client_acceptance_rate", "alpha"])
    n["acceptance_levels"] = len(both)
    n["acceptance_max_diff"] = float((both["client_acceptance_rate"] - both["alpha"]).abs().max()) \
        if len(both) else float("nan")
    n["acceptance_counts_equal"] = int(((both["client_draft_tokens"] == both["draft_tokens"])
                                        & (both["client_accepted_tokens"] == both["accepted_tokens"])
                                        ).sum())
    # SLO: share of levels meeting it at p95, and where it first fails.
    n["slo_met_levels"] = int(levels["slo_met_p95"].sum())
    failing = closed[~closed["slo_met_p95"].astype(bool)]
    n["slo_sentence"] = (
        f"every closed-loop level met the SLO at p95, up to concurrency {n['max_concurrency']}"
        if failing.empty else
        "the SLO was first missed at p95 at concurrency "
        f"{int(failing['concurrency'].min())} ({_join(sorted(set(failing['workload'])))})")
    # Crossover sentences, one per workload, from the γ with the largest speculative arm.
    parts = []
    for workload, group in cross.groupby("workload"):
        verdicts = [f"γ={int(r.gamma)}: {_verdict_text(r)}" for r in group.itertuples()]
        parts.append(f"'{workload}' — {'; '.join(verdicts)}")
    n["crossover_sentence"] = ". ".join(parts)
    n["n_crossover"] = int(np.isfinite(cross["crossover"]).sum())
    n["n_no_crossover"] = int((cross["crossover"] == np.inf).sum())
    n["n_below_from_start"] = int((cross["crossover"] == -np.inf).sum())
    # Batch the server ran and CPU per role.
    n["running_over_concurrency_min"] = float((closed["mean_running"] / closed["concurrency"]).min())
    n["running_over_concurrency_max"] = float((closed["mean_running"] / closed["concurrency"]).max())
    n["worker_cores_mean"] = float(levels["cpu_worker_cores"].mean())
    frontend = levels["cpu_client_cores"] + levels["cpu_api_server_cores"] + levels["cpu_engine_core_cores"]
    n["frontend_cores_max"] = float(frontend.max())
    n["frontend_cores_mean"] = float(frontend.mean())
    n["engine_core_cores_mean"] = float(levels["cpu_engine_core_cores"].mean())
    n["frontend_sentence"] = (
        "needed more than the one free core, so it took time from the model's core"
        if frontend.max() > 1.0 else
        "all but filled the one core the worker leaves free" if frontend.max() > 0.9 else
        "fitted within the one core the worker leaves free")
    by_c = frontend[levels["mode"] == "concurrency"].groupby(
        levels.loc[levels["mode"] == "concurrency", "concurrency"]).mean()
    n["frontend_trend"] = (f"went from {by_c.iloc[0]:.2f} to {by_c.iloc[-1]:.2f} cores"
                           + (" (it grows with load)" if by_c.iloc[-1] > 1.1 * by_c.iloc[0]
                              else " (roughly flat)" if by_c.iloc[-1] > 0.9 * by_c.iloc[0]
                              else " (it falls with load)"))
    n["client_cores_max"] = float(levels["cpu_client_cores"].max())
    n["foreign_cores_max"] = float(levels["cpu_foreign_cores"].max())
    from specbench.store.load import (
        MAX_FOREIGN_CORES,  # the sweep's threshold for a loaded cell
    )
    n["foreign_threshold"] = MAX_FOREIGN_CORES
    n["loaded_levels"] = int((levels["cpu_foreign_cores"] > MAX_FOREIGN_CORES).sum())
    cmp = sweep_comparison(levels, speed, sweep_cells)
    n["sweep_compared"] = len(cmp)
    n["sweep_max_batch"] = int(sweep_cells["batch"].max()) if sweep_cells is not None and len(
        sweep_cells) else 0
    n["sweep_gap_median_pct"] = float("nan")
    n["sweep_gap_sentence"] = "not comparable (no sweep of this SKU)"
    if len(cmp):
        gap = (cmp["serving_speedup"] / cmp["sweep_speedup_at_batch"] - 1) * 100
        n["sweep_gap_median_pct"] = float(gap.abs().median())
        n["sweep_gap_sentence"] = ("mostly below" if (gap < 0).mean() > 0.5 else
                                   "mostly above") + " the offline sweep's at the same batch"
    return Numbers(values=n, runs=[run.run_id])


def _verdict_text(row) -> str:
    if row.crossover == np.inf:
        return (f"no crossover up to {int(row.max_concurrency)}"
                + (f" (in {100 * row.share_with_crossover:.0f} % of resamples it falls below 1 "
                   "within range)" if row.share_with_crossover >= 0.025 else ""))
    if row.crossover == -np.inf:
        return f"below 1 already at concurrency {int(row.min_concurrency)}"
    lo = "below the lowest level" if row.crossover_lo == -np.inf else f"{row.crossover_lo:.1f}"
    hi = f"beyond {int(row.max_concurrency)}" if row.crossover_hi == np.inf else \
        f"{row.crossover_hi:.1f}"
    return f"falls below 1 at concurrency {row.crossover:.1f} (95 % interval {lo}–{hi})"
