"""The serving chapter's numbers: a real server under load, its SLO goodput, cost and crossover."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.noise import MAX_FOREIGN_CORES
from specbench.report.numbers import Numbers
from specbench.report.serving import sweep_comparison
from specbench.report.serving_economics import serving_tables
from specbench.report.wording import and_list, claim
from specbench.store.runs import Run
from specbench.theory.errors import percent_change
from specbench.theory.slo import GPU_SLO

__all__ = ["numbers"]

#: Tokens per second a reader reads, roughly (200–300 words a minute, ~1.3 tokens a word).
READING_TOKENS_PER_S = (3.0, 10.0)


def numbers(run: Run, sweep_cells: pd.DataFrame | None = None) -> Numbers:
    """Every number and data-dependent sentence of the serving chapter, with the run ids."""
    m = run.manifest
    levels, speed, cross = serving_tables(run)
    closed = levels[levels["mode"] == "concurrency"]
    spec = levels[levels["gamma"] > 0]
    labelled = sweep_cells is not None and len(sweep_cells) and "sku_label" in sweep_cells
    n = {"run_id": run.run_id, "sku": sweep_cells["sku_label"].iloc[0] if labelled else run.sku,
         "num_prompts": m["load"]["num_prompts"],
         "output_len": m["load"]["output_len"], "slo_ttft_ms": m["slo"]["ttft_ms"],
         "slo_tpot_ms": m["slo"]["tpot_ms"],
         "concurrencies": ", ".join(str(c) for c in m["grid"]["concurrencies"]),
         "max_concurrency": int(closed["concurrency"].max()),
         "request_rates": ", ".join(f"{r:g}" for r in m["grid"]["request_rates"]) or "none",
         "gammas": ", ".join(str(g) for g in m["grid"]["gammas"]),
         "workloads": and_list([f"'{w}'" for w in m["grid"]["workloads"]]),
         "n_levels": len(levels), "n_requests": int(levels["completed"].sum()),
         "failed": int(levels["failed"].sum()),
         "dataset_sha": (m["dataset"]["spec_bench_sha256"] or "")[:12],
         "price": m["economics"]["price_per_replica_hour_usd"],
         "demand": m["economics"]["demand_tokens_per_s"]}
    n["max_num_seqs"] = int(m["engine"]["settings"]["max_num_seqs"])
    n["slo_tokens_per_s"] = 1000.0 / n["slo_tpot_ms"]
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
    # Guards for the SLO paragraph's words.
    claim(READING_TOKENS_PER_S[0] <= n["slo_tokens_per_s"] <= READING_TOKENS_PER_S[1],
          "The TPOT limit is about reading speed", f"{n['slo_tokens_per_s']:.1f} tokens/s")
    claim(2 <= n["slo_ttft_ms"] / n["ttft_c1"] <= 10,
          "The TTFT limit leaves room for a few such prefills queued ahead of a request",
          f"{n['slo_ttft_ms']:.0f} ms over {n['ttft_c1']:.0f} ms")
    claim(n["max_concurrency"] == n["max_num_seqs"],
          "The largest concurrency measured is also the most sequences the server runs at once",
          f"{n['max_concurrency']} against max_num_seqs {n['max_num_seqs']}")
    # The client's acceptance against this project's reader, same window.
    both = spec.dropna(subset=["client_acceptance_rate", "alpha"])
    n["acceptance_levels"] = len(both)
    n["acceptance_max_diff"] = float((both["client_acceptance_rate"] - both["alpha"]).abs().max()) \
        if len(both) else float("nan")
    n["acceptance_counts_equal"] = int(
        ((both["client_draft_tokens"] == both["draft_tokens"])
         & (both["client_accepted_tokens"] == both["accepted_tokens"])).sum())
    n.update(_slo_numbers(closed))
    n.update(_load_numbers(speed, cross))
    n.update(_cpu_numbers(levels, closed, m))
    n.update(_sweep_gap(levels, speed, sweep_cells))
    return Numbers(values=n, runs=[run.run_id])


def _cpu_numbers(levels: pd.DataFrame, closed: pd.DataFrame, m: dict) -> dict:
    """The batch the server ran, and the CPU each role used against the cores the worker's
    threads leave free."""
    out = {}
    running_over_concurrency = closed["mean_running"] / closed["concurrency"]
    out["running_over_concurrency_min"] = float(running_over_concurrency.min())
    out["running_over_concurrency_max"] = float(running_over_concurrency.max())
    out["worker_cores_mean"] = float(levels["cpu_worker_cores"].mean())
    frontend = (levels["cpu_client_cores"] + levels["cpu_api_server_cores"]
                + levels["cpu_engine_core_cores"])
    out["frontend_cores_max"] = float(frontend.max())
    out["frontend_cores_mean"] = float(frontend.mean())
    out["engine_core_cores_mean"] = float(levels["cpu_engine_core_cores"].mean())
    # The worker's OpenMP threads hold their cores; the rest is what the front end can use.
    out["cpu_count"] = int(m["hardware"]["cpu_count"])
    out["worker_threads"] = int(m["hardware"].get("threads", 1))
    free = out["free_cores"] = out["cpu_count"] - out["worker_threads"]
    out["frontend_sentence"] = (
        "needed more than the cores the worker leaves free, so it took time from the model's"
        if frontend.max() > free else
        "all but filled the cores the worker leaves free" if frontend.max() > 0.9 * free else
        "fitted within the cores the worker leaves free")
    by_c = frontend[levels["mode"] == "concurrency"].groupby(
        levels.loc[levels["mode"] == "concurrency", "concurrency"]).mean()
    out["frontend_trend"] = (f"went from {by_c.iloc[0]:.2f} to {by_c.iloc[-1]:.2f} cores"
                             + (" (it grows with load)" if by_c.iloc[-1] > 1.1 * by_c.iloc[0]
                                else " (roughly flat)" if by_c.iloc[-1] > 0.9 * by_c.iloc[0]
                                else " (it falls with load)"))
    out["client_cores_max"] = float(levels["cpu_client_cores"].max())
    out["foreign_cores_max"] = float(levels["cpu_foreign_cores"].max())
    out["foreign_threshold"] = MAX_FOREIGN_CORES  # the sweep's threshold for a loaded cell
    out["loaded_levels"] = int((levels["cpu_foreign_cores"] > MAX_FOREIGN_CORES).sum())
    return out


def _sweep_gap(levels: pd.DataFrame, speed: pd.DataFrame, sweep_cells) -> dict:
    """The served speedup against the sweep's at the same batch."""
    out = {}
    cmp = sweep_comparison(levels, speed, sweep_cells)
    out["sweep_compared"] = len(cmp)
    out["sweep_max_batch"] = int(sweep_cells["batch"].max()) if sweep_cells is not None and len(
        sweep_cells) else 0
    out["sweep_gap_median_pct"] = float("nan")
    out["sweep_below_n"] = 0
    if len(cmp):
        gap = percent_change(cmp["serving_speedup"], cmp["sweep_speedup_at_batch"])
        out["sweep_gap_median_pct"] = float(gap.abs().median())
        out["sweep_below_n"] = int((gap < 0).sum())
    return out


def _slo_numbers(closed: pd.DataFrame) -> dict:
    """Where the closed-loop levels first miss the SLO at p95, on how many workloads, and
    whether speculation changes that."""
    failing = closed[~closed["slo_met_p95"].astype(bool)]
    workloads = closed["workload"].nunique()
    if failing.empty:
        return {"slo_first_missed": "none", "slo_sentence":
                f"every closed-loop level met the SLO at p95, up to concurrency "
                f"{int(closed['concurrency'].max())}"}
    first = int(failing["concurrency"].min())
    at_first = closed[closed["concurrency"] == first]
    missed = at_first[~at_first["slo_met_p95"].astype(bool)]
    every_gamma = all(not g["slo_met_p95"].astype(bool).any()
                      for _, g in at_first[at_first["workload"].isin(missed["workload"])]
                      .groupby("workload"))
    return {"slo_first_missed": first, "slo_sentence":
            f"the SLO was first missed at p95 at concurrency {first}, on "
            f"{missed['workload'].nunique()} of {workloads} workloads"
            + (", with and without speculation" if every_gamma else "")}


def _load_numbers(speed: pd.DataFrame, cross: pd.DataFrame) -> dict:
    """How speculation's speedup moves from the lightest to the heaviest closed-loop load,
    per workload × γ, and the pair whose speedup falls furthest."""
    lo, hi = speed["concurrency"].min(), speed["concurrency"].max()
    ends = speed.pivot_table(index=["workload", "gamma"], columns="concurrency",
                             values="speedup")[[lo, hi]]
    fall = ends[lo] - ends[hi]
    (workload, gamma) = fall.idxmax()
    return {"n_pairs": len(cross), "load_lo": int(lo), "load_hi": int(hi),
            "n_crossover": int(np.isfinite(cross["crossover"]).sum()),
            "n_no_crossover": int((cross["crossover"] == np.inf).sum()),
            "n_below_from_start": int((cross["crossover"] == -np.inf).sum()),
            "n_falls": int((fall > 0).sum()),
            "speedup_lo_median": float(ends[lo].median()),
            "speedup_hi_median": float(ends[hi].median()),
            "drop_workload": workload, "drop_gamma": int(gamma),
            "drop_from": float(ends.loc[(workload, gamma), lo]),
            "drop_to": float(ends.loc[(workload, gamma), hi])}
