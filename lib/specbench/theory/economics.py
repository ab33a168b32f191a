"""The economics worksheet of the second source document ("Speculative decoding economics").

Two speedup paths, kept apart on purpose:

* the *theoretical* path (Leviathan et al.): a modelled per-position acceptance probability α,
  independent across positions, k speculated tokens, draft cost c and verification overhead v,
  both as fractions of one baseline target step;
* the *measured* path: the engine's mean acceptance length L (bonus token included) divided by
  the measured speculative-iteration / baseline-step cost ratio.

Never substitute the aggregate accepted/proposed telemetry fraction for the theoretical α.
Cost is counted on whole replicas, per million SLO-qualified accepted tokens.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

from specbench.theory._validate import check, scalar_or_array

__all__ = [
    "crossover_point",
    "tokens_per_step",
    "net_speedup",
    "optimal_k",
    "break_even_alpha",
    "measured_decode_speedup",
    "replicas_needed",
    "cost_per_million",
    "kv_capacity_tokens",
    "TABLE3_ALPHAS",
    "speedup_grid",
    "worksheet_values",
]

# The rows of the worksheet's Table 3: its readings quote α = 0.5 … 0.9, and its stress
# ranges ("0.2x to 0.5x", "0.7x to 1.6x") are the spread over exactly these rows.
TABLE3_ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)


def _check_k(k):
    k = check("k", k, low=0)
    if not np.all(np.asarray(k) == np.floor(np.asarray(k, dtype=float))):
        raise ValueError(f"k must be a whole number of tokens, got {k!r}")


def tokens_per_step(alpha, k):
    """Expected tokens per iteration, Σ_{i=0..k} α^i = (1 − α^(k+1)) / (1 − α)."""
    alpha = check("alpha", alpha, low=0, high=1)
    _check_k(k)
    alpha = np.asarray(alpha, dtype=float)
    k = np.asarray(k, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        geometric = (1 - alpha ** (k + 1)) / (1 - alpha)
    return scalar_or_array(np.where(alpha == 1.0, k + 1, geometric))


def net_speedup(alpha, k, c, v=0.0):
    """Leviathan et al. with verification overhead: tokens_per_step / (1 + k·(c + v))."""
    c = check("c", c, low=0)
    v = check("v", v, low=0)
    return scalar_or_array(tokens_per_step(alpha, k) / (1 + np.asarray(k) * (c + v)))


def optimal_k(alpha, c, v=0.0, k_max=16):
    """The k in 0..k_max with the highest :func:`net_speedup` (0 means: do not speculate)."""
    k_max = check("k_max", k_max, low=0)
    ks = np.arange(int(k_max) + 1)
    return int(ks[np.argmax([net_speedup(alpha, k, c, v) for k in ks])])


def break_even_alpha(k, c, v=0.0):
    """The per-position α at which :func:`net_speedup` equals 1, solved to 1e-6.

    Raises ``ValueError`` when no α in [0, 1] breaks even (the cost of k drafts and their
    verification exceeds even the all-accepted k+1 tokens).
    """
    _check_k(k)
    if k < 1:
        raise ValueError(f"k must be >= 1 for a break-even acceptance, got {k!r}")

    def excess(a):
        return net_speedup(a, k, c, v) - 1.0

    if excess(1.0) < 0:
        raise ValueError(
            f"no acceptance breaks even at k={k}, c={c}, v={v}: "
            f"even α=1 gives {net_speedup(1.0, k, c, v):.3f}×"
        )
    if excess(0.0) >= 0:
        return 0.0
    return float(brentq(excess, 0.0, 1.0, xtol=1e-9))


def measured_decode_speedup(mean_acceptance_length, step_cost_ratio):
    """Operational path: L / (speculative iteration time / baseline decode-step time)."""
    mean_acceptance_length = check("mean_acceptance_length", mean_acceptance_length, low=1)
    step_cost_ratio = check("step_cost_ratio", step_cost_ratio, low=0, low_open=True)
    return scalar_or_array(mean_acceptance_length / step_cost_ratio)


def replicas_needed(demand_tokens_per_s, qualified_tokens_per_s):
    """Whole replicas to serve the peak demand: ceil(demand / per-replica qualified rate)."""
    demand_tokens_per_s = check("demand_tokens_per_s", demand_tokens_per_s, low=0, low_open=True)
    qualified_tokens_per_s = check("qualified_tokens_per_s", qualified_tokens_per_s, low=0,
                                   low_open=True)
    return math.ceil(demand_tokens_per_s / qualified_tokens_per_s)


def cost_per_million(gpus_per_replica, gpu_hour_usd, qualified_tokens_per_s,
                     demand_tokens_per_s, actual_qualified_fleet_tokens_per_s):
    """The worksheet's calculator: (replicas, USD per million SLO-qualified accepted tokens).

    Whole replicas are paid for; the served qualified throughput cannot exceed the demand or
    the fleet's capacity.
    """
    for name, value in [("gpus_per_replica", gpus_per_replica), ("gpu_hour_usd", gpu_hour_usd),
                        ("qualified_tokens_per_s", qualified_tokens_per_s),
                        ("demand_tokens_per_s", demand_tokens_per_s),
                        ("actual_qualified_fleet_tokens_per_s",
                         actual_qualified_fleet_tokens_per_s)]:
        check(name, value, low=0, low_open=True)
    replicas = replicas_needed(demand_tokens_per_s, qualified_tokens_per_s)
    capacity = replicas * qualified_tokens_per_s
    if actual_qualified_fleet_tokens_per_s > min(demand_tokens_per_s, capacity):
        raise ValueError(
            f"actual_qualified_fleet_tokens_per_s={actual_qualified_fleet_tokens_per_s} exceeds "
            f"min(demand={demand_tokens_per_s}, capacity={capacity}): served qualified "
            "throughput cannot exceed demand or capacity"
        )
    fleet_cost = (replicas * gpus_per_replica * gpu_hour_usd * 1e6
                  / (3600 * actual_qualified_fleet_tokens_per_s))
    return replicas, fleet_cost


def kv_capacity_tokens(free_bytes, bytes_per_token):
    """How many tokens of KV cache fit: floor(free bytes / bytes per token)."""
    free_bytes = check("free_bytes", free_bytes, low=0)
    bytes_per_token = check("bytes_per_token", bytes_per_token, low=0, low_open=True)
    return int(free_bytes // bytes_per_token)


def speedup_grid(alphas=TABLE3_ALPHAS, ks=range(1, 8), c: float = 0.05, stress_k: int = 4,
                 stress_c: float = 0.10, stress_v: float = 0.25):
    """The worksheet's Table 3, computed: :func:`net_speedup` for every α × k at draft cost c
    and v = 0, plus two stress columns at k = ``stress_k``: draft cost ``stress_c`` and
    verification overhead ``stress_v`` (at draft cost c)."""
    import pandas as pd
    grid = pd.DataFrame({f"k={k}": [net_speedup(a, k, c) for a in alphas] for k in ks},
                        index=pd.Index(alphas, name="α"))
    grid[f"k={stress_k}, c={stress_c:g}"] = [net_speedup(a, stress_k, stress_c) for a in alphas]
    grid[f"k={stress_k}, v={stress_v:g}"] = [net_speedup(a, stress_k, c, stress_v)
                                             for a in alphas]
    return grid


def worksheet_values() -> dict:
    """The worksheet's quoted formula values, recomputed by this module, keyed as the
    published ones in :mod:`specbench.report.reference` (the book compares them only there)."""
    grid = speedup_grid()
    c_loss = grid["k=4"] - grid["k=4, c=0.1"]
    v_loss = grid["k=4"] - grid["k=4, v=0.25"]
    return {
        "break_even_alpha": break_even_alpha(4, 0.05, 0.0),
        "break_even_alpha_v0.1": break_even_alpha(4, 0.05, 0.1),
        "break_even_alpha_v0.25": break_even_alpha(4, 0.05, 0.25),
        "break_even_alpha_v0.5": break_even_alpha(4, 0.05, 0.5),
        "table3_a0.6_k4": grid.loc[0.6, "k=4"],
        "table3_a0.7_k4": grid.loc[0.7, "k=4"],
        "table3_a0.8_k4": grid.loc[0.8, "k=4"],
        "table3_a0.7_k4_v0.25": grid.loc[0.7, "k=4, v=0.25"],
        "table3_best_k_a0.5": optimal_k(0.5, 0.05, k_max=7),
        "table3_c0.10_loss_min": c_loss.min(), "table3_c0.10_loss_max": c_loss.max(),
        "table3_v0.25_loss_min": v_loss.min(), "table3_v0.25_loss_max": v_loss.max(),
        "best_c0.10_a0.5": max(net_speedup(0.5, k, 0.10) for k in range(1, 8)),
    }


def crossover_point(concurrency: np.ndarray, speedup: np.ndarray) -> float:
    """The concurrency where the speedup first falls below 1, interpolated linearly in
    log2(concurrency) between the two levels around it; -inf when it is below 1 already at the
    lowest level, +inf when it never falls below 1 in range."""
    order = np.argsort(concurrency)
    c, s = np.asarray(concurrency, float)[order], np.asarray(speedup, float)[order]
    below = np.nonzero(s < 1)[0]
    if not len(below):
        return math.inf
    i = below[0]
    if i == 0:
        return -math.inf
    x0, x1 = np.log2(c[i - 1]), np.log2(c[i])
    x = x0 + (s[i - 1] - 1) / (s[i - 1] - s[i]) * (x1 - x0)
    return float(2 ** x)
