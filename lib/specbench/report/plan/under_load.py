"""The operator's plan checked under load: a serving run with a 'plan' arm (``specbench
serve-bench --plan``) beside fixed γ and speculation off, on the prompts the plan was made for.

Per closed-loop level (concurrency c, the batch the plan calls c), the plan's **regret** is its
median time per output token over the best measured arm's at that level, minus one; its
goodput regret is one minus its goodput over the best goodput. Two baselines get the same
score from the fixed arms' measurements: "always γ=4", and **ratio transfer** — the γ the
calibration's own measured speedups favour at that batch (geometric mean over its workloads,
acceptance-blind: what one would pick from `make book`'s numbers without the plan's pass over
one's prompts). The crossover — the load where speculation stops paying — is measured on the
envelope (speculation off over the best fixed γ at each level) and predicted from the plan's
recommendation (its best predicted speedup per batch), both with
:func:`~specbench.report.serving_economics.crossover_point`.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specbench.report.plan.gamma import recommend_by_speedup
from specbench.report.serving_economics import crossover_point
from specbench.store.runs import Run
from specbench.theory.errors import percent_error

__all__ = ["has_plan", "arm_latencies", "ratio_transfer_choice", "regrets", "crossover",
           "summary", "predicted_vs_measured", "BASELINE_GAMMA"]

BASELINE_GAMMA = 4          # the fixed γ an operator would pick without a plan
N_BOOT = 1000


def has_plan(run: Run) -> bool:
    return run.manifest.get("kind") == "serving" and bool(run.manifest.get("plan"))


def _closed(run: Run) -> pd.DataFrame:
    requests = run.table("requests.csv")
    return requests[requests["mode"] == "concurrency"]


def arm_latencies(run: Run, seed: int = 0) -> pd.DataFrame:
    """Per arm and level: median TPOT with a 95 % bootstrap interval over requests, and the
    level's goodput (requests/s meeting the SLO, the client's number)."""
    rng = np.random.default_rng(seed)
    levels = run.table("levels.csv")
    levels = levels[levels["mode"] == "concurrency"]
    rows = []
    for (arm, level), group in _closed(run).groupby(["arm", "level"]):
        tpot = group["tpot_ms"].to_numpy(float)
        draws = rng.choice(len(tpot), size=(N_BOOT, len(tpot)))
        median, p90 = np.median(tpot[draws], axis=1), np.percentile(tpot[draws], 90, axis=1)
        meta = levels[(levels["arm"] == arm) & (levels["concurrency"] == level)].iloc[0]
        # goodput = qualified requests / the level's duration: its interval resamples which
        # requests qualified (the duration is the level's, measured once)
        good = (group["good"].to_numpy(bool) if "good" in group
                else np.ones(len(tpot), bool))
        per_request = float(meta["goodput"]) / max(good.mean(), 1e-12) / len(tpot)
        goodput = good[draws].sum(axis=1) * per_request
        rows.append({"arm": arm, "gamma": int(meta["gamma"]), "concurrency": int(level),
                     "requests": len(tpot), "tpot_ms": float(np.median(tpot)),
                     "tpot_lo": float(np.percentile(median, 2.5)),
                     "tpot_hi": float(np.percentile(median, 97.5)),
                     "p90_tpot_ms": float(np.percentile(tpot, 90)),
                     "p90_lo": float(np.percentile(p90, 2.5)),
                     "p90_hi": float(np.percentile(p90, 97.5)),
                     "goodput": float(meta["goodput"]),
                     "goodput_lo": float(np.percentile(goodput, 2.5)) if good.any() else 0.0,
                     "goodput_hi": float(np.percentile(goodput, 97.5)) if good.any() else 0.0,
                     "mean_running": float(meta["mean_running"])})
    return pd.DataFrame(rows)


def ratio_transfer_choice(calibration_cells: pd.DataFrame, batch: int) -> int:
    """The γ the calibration's measured speedups favour at ``batch`` (its nearest measured
    batch at or below, else its smallest): the highest geometric mean over its workloads, 0
    where none is above 1."""
    spec = calibration_cells[calibration_cells["gamma"] > 0]
    batches = sorted(spec["batch"].unique())
    below = [b for b in batches if b <= batch]
    at = below[-1] if below else batches[0]
    mine = spec[spec["batch"] == at]
    means = mine.groupby("gamma")["speedup"].apply(lambda s: float(np.exp(np.log(s).mean())))
    return recommend_by_speedup({int(g): s for g, s in means.items()})


def _arm_of(gamma: int) -> str:
    return "off" if gamma == 0 else f"γ={gamma}"


def regrets(run: Run, calibration_cells: pd.DataFrame, seed: int = 0,
            latencies: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per level: the best arm, and the regret (TPOT and goodput) of the plan, of "always γ=4"
    and of ratio transfer, the plan's with a 95 % bootstrap interval (``latencies``: the run's
    :func:`arm_latencies` where the caller has them)."""
    rng = np.random.default_rng(seed)
    lat = arm_latencies(run, seed) if latencies is None else latencies
    closed = _closed(run)
    rows = []
    for level, here in lat.groupby("concurrency"):
        here = here.set_index("arm")
        best = here["tpot_ms"].idxmin()
        best_goodput = here["goodput"].max()
        rt_gamma = ratio_transfer_choice(calibration_cells, int(level))
        row = {"concurrency": int(level), "best_arm": best,
               "best_tpot_ms": float(here.loc[best, "tpot_ms"]),
               "ratio_transfer_gamma": rt_gamma}
        for name, arm in (("plan", "plan"), ("always_g4", _arm_of(BASELINE_GAMMA)),
                          ("ratio_transfer", _arm_of(rt_gamma))):
            if arm not in here.index:
                row[f"{name}_regret"] = row[f"{name}_goodput_regret"] = math.nan
                continue
            row[f"{name}_regret"] = float(here.loc[arm, "tpot_ms"] / here.loc[best, "tpot_ms"]
                                          - 1)
            row[f"{name}_goodput_regret"] = (float(1 - here.loc[arm, "goodput"] / best_goodput)
                                             if best_goodput > 0 else math.nan)
        mine = closed[closed["level"] == level]
        plan = mine[mine["arm"] == "plan"]["tpot_ms"].to_numpy(float)
        top = mine[mine["arm"] == best]["tpot_ms"].to_numpy(float)
        boot = (np.median(rng.choice(plan, size=(N_BOOT, len(plan))), axis=1)
                / np.median(rng.choice(top, size=(N_BOOT, len(top))), axis=1) - 1)
        row["plan_regret_lo"], row["plan_regret_hi"] = (float(np.percentile(boot, 2.5)),
                                                        float(np.percentile(boot, 97.5)))
        rows.append(row)
    return pd.DataFrame(rows)


def _envelope(closed: pd.DataFrame, levels, draw=None) -> np.ndarray:
    """Speculation off over the best fixed γ, per level (resampled when ``draw`` is given)."""
    def med(values):
        values = values.to_numpy(float)
        return np.median(draw(values) if draw else values)
    out = []
    for c in levels:
        here = closed[(closed["level"] == c) & (closed["arm"] != "plan")]
        off = med(here[here["gamma"] == 0]["tpot_ms"])
        spec = min(med(g["tpot_ms"]) for _, g in here[here["gamma"] > 0].groupby("gamma"))
        out.append(off / spec)
    return np.array(out)


def crossover(run: Run, seed: int = 0) -> dict:
    """The measured crossover (with a 95 % bootstrap interval) and the plan's predicted one;
    ``within_one_level`` when they lie at most one doubling of load apart (the levels double)
    or both lie beyond the measured range."""
    rng = np.random.default_rng(seed)
    closed = _closed(run)
    levels = sorted(closed["level"].unique())
    measured = crossover_point(np.array(levels), _envelope(closed, levels))
    boot = np.array([crossover_point(np.array(levels), _envelope(
        closed, levels, lambda v: rng.choice(v, len(v)))) for _ in range(N_BOOT)])
    lo, hi = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
    recs = pd.DataFrame(run.manifest["plan"]["recommendation"])
    predicted = crossover_point(recs["batch"].to_numpy(float),
                                recs["best_speedup"].to_numpy(float))
    top = max(levels)
    if math.isinf(predicted) and math.isinf(measured):
        within = predicted == measured
    else:
        # beyond the measured range counts as the next doubling, so "never" and "at the top
        # level" are one level apart, not infinitely far
        def capped(x):
            return min(max(x, min(levels) / 2), 2 * top)
        within = abs(math.log2(capped(predicted)) - math.log2(capped(measured))) <= 1
    return {"measured": measured, "measured_lo": float(lo), "measured_hi": float(hi),
            "predicted": predicted, "within_one_level": bool(within),
            "levels": [int(c) for c in levels]}


def summary(table: pd.DataFrame) -> dict:
    """Median and worst regret over levels, per policy."""
    out = {}
    for name in ("plan", "always_g4", "ratio_transfer"):
        values = table[f"{name}_regret"].dropna()
        out[f"{name}_median"] = float(values.median()) if len(values) else math.nan
        out[f"{name}_worst"] = float(values.max()) if len(values) else math.nan
    return out


def predicted_vs_measured(run: Run, seed: int = 0) -> pd.DataFrame:
    """Per fixed γ > 0 and level: the plan's predicted speedup at batch = concurrency (with its
    interval and the step cost's basis: measured, interpolated or extrapolated in batch and
    γ) beside the measured speedup over speculation off, median TPOT over median TPOT with a
    95 % bootstrap interval over requests."""
    rng = np.random.default_rng(seed)
    predictions = pd.DataFrame(run.manifest["plan"]["predictions"])
    closed = _closed(run)
    closed = closed[closed["arm"] != "plan"]
    rows = []
    for (gamma, level), spec in closed[closed["gamma"] > 0].groupby(["gamma", "level"]):
        off = closed[(closed["gamma"] == 0) & (closed["level"] == level)]["tpot_ms"]
        predicted = predictions[(predictions["gamma"] == gamma)
                                & (predictions["batch"] == level)]
        if off.empty or predicted.empty:
            continue
        base, mine = off.to_numpy(float), spec["tpot_ms"].to_numpy(float)
        boot = (np.median(rng.choice(base, size=(N_BOOT, len(base))), axis=1)
                / np.median(rng.choice(mine, size=(N_BOOT, len(mine))), axis=1))
        p = predicted.iloc[0]
        measured = float(np.median(base) / np.median(mine))
        rows.append({"gamma": int(gamma), "concurrency": int(level),
                     "predicted": float(p["speedup"]), "predicted_lo": float(p["low"]),
                     "predicted_hi": float(p["high"]), "measured": measured,
                     "measured_lo": float(np.percentile(boot, 2.5)),
                     "measured_hi": float(np.percentile(boot, 97.5)),
                     "error_pct": percent_error(float(p["speedup"]), measured),
                     "batch_basis": p.get("batch_basis", ""),
                     "gamma_basis": p.get("gamma_basis", "")})
    return pd.DataFrame(rows)
