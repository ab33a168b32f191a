"""Serving economics from a stored serving run: cost per million SLO-qualified tokens on whole
replicas, the speedup per load level with bootstrap intervals, and the crossover load."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd

from specbench.theory.economics import crossover_point

__all__ = ["add_costs", "speedups", "crossover_point", "crossovers", "serving_tables", "resample",
           "small_median"]


# -- economics, speedup and crossover ---------------------------------------------------------

def add_costs(levels: pd.DataFrame, price_per_replica_hour: float,
              demand_tokens_per_s: float) -> pd.DataFrame:
    """Cost per million SLO-qualified output tokens on whole replicas (one replica = one
    server of this configuration, priced per replica-hour)."""
    from specbench.theory.economics import cost_per_million

    replicas, costs = [], []
    for q in levels["qualified_tokens_per_s"]:
        if not q > 0:
            replicas.append(np.nan)
            costs.append(np.nan)   # no request met the SLO: no qualified token to price
            continue
        # The fleet serves the whole demand: replicas = ceil(demand / q), all paid for.
        n, usd = cost_per_million(1, price_per_replica_hour, q, demand_tokens_per_s,
                                  demand_tokens_per_s)
        replicas.append(n)
        costs.append(usd)
    return levels.assign(replicas=replicas, cost_per_million_usd=costs)


def small_median(values: np.ndarray) -> float:
    """np.median's value in a tenth of its time on the few dozen requests of a level: the
    crossover bootstraps take some 10^5 medians per chapter."""
    if len(values) and not np.isnan(values).any():
        return statistics.median(values.tolist())
    return float(np.median(values))


def resample(values: np.ndarray, rng) -> np.ndarray:
    """What ``rng.choice(values, len(values))`` draws (the same stream), without its checks."""
    return values[rng.integers(0, len(values), len(values))]


def _bootstrap_ratio(base: np.ndarray, spec: np.ndarray, rng, n: int = 2000) -> np.ndarray:
    b = rng.choice(base, size=(n, len(base)), replace=True)
    s = rng.choice(spec, size=(n, len(spec)), replace=True)
    return np.median(b, axis=1) / np.median(s, axis=1)


def speedups(requests: pd.DataFrame, seed: int = 0, n_boot: int = 2000) -> pd.DataFrame:
    """Speedup of each γ over γ=0 at each closed-loop concurrency, per workload: the ratio of
    median TPOT (per-token latency, prefill excluded), with a 95 % bootstrap interval over
    requests."""
    rng = np.random.default_rng(seed)
    closed = requests[requests["mode"] == "concurrency"]
    rows = []
    for (workload, level), group in closed.groupby(["workload", "level"]):
        base = group[group["gamma"] == 0]["tpot_ms"].to_numpy()
        if not len(base):
            continue
        for gamma, spec in group[group["gamma"] > 0].groupby("gamma"):
            s = spec["tpot_ms"].to_numpy()
            boot = _bootstrap_ratio(base, s, rng, n_boot)
            rows.append({"workload": workload, "gamma": int(gamma), "concurrency": int(level),
                         "speedup": float(np.median(base) / np.median(s)),
                         "speedup_lo": float(np.percentile(boot, 2.5)),
                         "speedup_hi": float(np.percentile(boot, 97.5))})
    return pd.DataFrame(rows, columns=["workload", "gamma", "concurrency", "speedup",
                                       "speedup_lo", "speedup_hi"])


def crossovers(requests: pd.DataFrame, seed: int = 0, n_boot: int = 1000) -> pd.DataFrame:
    """Per workload and γ: the crossover concurrency, its 95 % bootstrap interval (requests
    resampled within each level and arm), and the share of resamples with a crossover."""
    rng = np.random.default_rng(seed)
    closed = requests[requests["mode"] == "concurrency"]
    rows = []
    for workload, wgroup in closed.groupby("workload"):
        levels = sorted(wgroup["level"].unique())
        base = {c: wgroup[(wgroup["gamma"] == 0) & (wgroup["level"] == c)]["tpot_ms"].to_numpy()
                for c in levels}
        for gamma in sorted(g for g in wgroup["gamma"].unique() if g > 0):
            spec = {c: wgroup[(wgroup["gamma"] == gamma) & (wgroup["level"] == c)][
                "tpot_ms"].to_numpy() for c in levels}
            cs = [c for c in levels if len(base[c]) and len(spec[c])]
            if not cs:
                continue
            point = crossover_point(np.array(cs), np.array(
                [np.median(base[c]) / np.median(spec[c]) for c in cs]))
            boot = np.array([crossover_point(np.array(cs), np.array([
                small_median(resample(base[c], rng)) / small_median(resample(spec[c], rng))
                for c in cs]))
                for _ in range(n_boot)])
            # Quantiles that pick resampled values (no interpolation), so ±inf ("below 1
            # from the start", "no crossover in range") stay what they are.
            lo, hi = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
            rows.append({"workload": workload, "gamma": int(gamma),
                         "max_concurrency": int(max(cs)), "min_concurrency": int(min(cs)),
                         "crossover": point, "crossover_lo": float(lo),
                         "crossover_hi": float(hi),
                         "share_with_crossover": float(np.mean(np.isfinite(boot) | (boot < 0))),
                         "verdict": _verdict(point, cs)})
    return pd.DataFrame(rows, columns=["workload", "gamma", "max_concurrency",
                                       "min_concurrency", "crossover", "crossover_lo",
                                       "crossover_hi", "share_with_crossover", "verdict"])


def _verdict(point: float, levels) -> str:
    if point == math.inf:
        return f"no crossover up to {int(max(levels))}"
    if point == -math.inf:
        return f"below 1 already at {int(min(levels))}"
    return f"crossover at {point:.1f}"


def serving_tables(run) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """A serving run's levels with their cost per million, its speedups and its crossovers,
    computed from the stored measurements (``levels.csv``, ``requests.csv``) and the run's
    economics parameters (price per replica-hour and demand: parameters, not measurements)."""
    economics = run.manifest["economics"]
    levels = _fixed_arms(run.table("levels.csv")).drop(
        columns=["replicas", "cost_per_million_usd"], errors="ignore")
    levels = add_costs(levels, economics["price_per_replica_hour_usd"],
                       economics["demand_tokens_per_s"])
    requests = _fixed_arms(run.table("requests.csv"))
    return levels, speedups(requests), crossovers(requests)


def _fixed_arms(table: pd.DataFrame) -> pd.DataFrame:
    """The fixed-γ arms only: a plan's arm (``serve-bench --plan``) is judged apart
    (:mod:`specbench.report.plan.under_load`), never mixed into the per-γ speedups."""
    return table[table["arm"] != "plan"] if "arm" in table else table
