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

A plan made with a step model also predicts every arm at every level by driving vLLM's own
scheduler (``plan["load"]``, sealed before the load): :func:`load_predictions` sets each
prediction beside the measured median, :func:`load_summary` scores them, and :func:`crossover`
then takes the predicted crossover and its interval from there. Older plans have no ``load``
and keep the recommendation's crossover.
"""
from __future__ import annotations

import bisect
import math

import numpy as np
import pandas as pd

from specbench.report.plan.gamma import recommend_by_speedup
from specbench.report.serving_economics import crossover_point, resample, small_median
from specbench.store.runs import Run
from specbench.theory.errors import percent_error

__all__ = ["has_plan", "has_load_prediction", "arm_latencies", "ratio_transfer_choice",
           "regrets", "crossover", "summary", "predicted_vs_measured", "load_number",
           "load_predictions", "load_summary", "anchored_errors", "anchored_phrase",
           "BASELINE_GAMMA", "LOAD_GOAL_PCT", "LOAD_WORST_PCT"]

BASELINE_GAMMA = 4          # the fixed γ an operator would pick without a plan
N_BOOT = 1000
#: The goal for the scheduler-driven prediction of each arm's median TPOT: each arm within
#: LOAD_GOAL_PCT (its median over levels), no arm-level beyond LOAD_WORST_PCT.
LOAD_GOAL_PCT = 10.0
LOAD_WORST_PCT = 15.0


def has_plan(run: Run) -> bool:
    return run.manifest.get("kind") == "serving" and bool(run.manifest.get("plan"))


def has_load_prediction(run: Run) -> bool:
    """A serving run whose plan also predicted every arm under load (``plan["load"]``)."""
    return has_plan(run) and bool(run.manifest["plan"].get("load"))


def load_number(value) -> float:
    """A number of ``plan["load"]`` as JSON carries it: a float, "inf" or "-inf" (JSON has no
    infinity), or null (unknown: NaN)."""
    return math.nan if value is None else float(value)   # float() reads "inf" and "-inf"


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


def _fixed_arm_tpots(closed: pd.DataFrame, levels) -> list:
    """Per level: speculation off's TPOTs and each fixed γ's (γ ascending), split once so the
    bootstrap resamples arrays instead of filtering the table a thousand times."""
    fixed = closed[closed["arm"] != "plan"]
    out = []
    for c in levels:
        here = fixed[fixed["level"] == c]
        off = here[here["gamma"] == 0]["tpot_ms"].to_numpy(float)
        spec = [g["tpot_ms"].to_numpy(float) for _, g in here[here["gamma"] > 0].groupby("gamma")]
        out.append((off, spec))
    return out


def _envelope(tpots: list, draw=None) -> np.ndarray:
    """Speculation off over the best fixed γ, per level (resampled when ``draw`` is given;
    off first, then each γ ascending, so a seed gives the same draws every time)."""
    def med(values):
        return small_median(draw(values) if draw else values)
    return np.array([med(off) / min(med(v) for v in spec) for off, spec in tpots])


def crossover(run: Run, seed: int = 0) -> dict:
    """The measured crossover (with a 95 % bootstrap interval) and the plan's predicted one:
    from ``plan["load"]`` with its interval where the plan has it, else from the
    recommendation (no interval). ``within_one_level`` when they lie at most one doubling of
    load apart (the levels double) or both beyond the measured range;
    ``measured_in_predicted`` when the measured one lies in the predicted interval or between
    the same two consecutive levels as the predicted point."""
    rng = np.random.default_rng(seed)
    closed = _closed(run)
    levels = sorted(closed["level"].unique())
    tpots = _fixed_arm_tpots(closed, levels)
    measured = crossover_point(np.array(levels), _envelope(tpots))
    boot = np.array([crossover_point(np.array(levels), _envelope(
        tpots, lambda v: resample(v, rng))) for _ in range(N_BOOT)])
    lo, hi = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
    predicted, predicted_lo, predicted_hi, source = _predicted_crossover(run.manifest["plan"])
    return {"measured": measured, "measured_lo": float(lo), "measured_hi": float(hi),
            "predicted": predicted, "predicted_lo": predicted_lo, "predicted_hi": predicted_hi,
            "predicted_from": source,
            "within_one_level": _within_one_level(predicted, measured, levels),
            "measured_in_predicted": _in_predicted(measured, predicted, predicted_lo,
                                                   predicted_hi, levels),
            "levels": [int(c) for c in levels]}


def _predicted_crossover(plan: dict) -> tuple[float, float, float, str]:
    """The plan's crossover, its interval (NaN where it has none) and where it came from."""
    load = plan.get("load") or {}
    if "crossover" in load:
        c = load["crossover"] or {}
        return (load_number(c.get("point")), load_number(c.get("low")),
                load_number(c.get("high")), "load")
    recs = pd.DataFrame(plan["recommendation"])
    return (crossover_point(recs["batch"].to_numpy(float), recs["best_speedup"].to_numpy(float)),
            math.nan, math.nan, "recommendation")


def _within_one_level(predicted: float, measured: float, levels) -> bool:
    if math.isinf(predicted) and math.isinf(measured):
        return predicted == measured

    # beyond the measured range counts as the next doubling, so "never" and "at the top
    # level" are one level apart, not infinitely far
    def capped(x):
        return min(max(x, min(levels) / 2), 2 * max(levels))
    return bool(abs(math.log2(capped(predicted)) - math.log2(capped(measured))) <= 1)


def _in_predicted(measured: float, point: float, low: float, high: float, levels) -> bool:
    """Inside [low, high], or at the same load level as the predicted point: between the same
    two consecutive levels, both below the lowest (-inf) or both beyond the highest (inf). An
    unknown point (NaN) predicts nothing, so nothing lies in it."""
    if math.isnan(point) or math.isnan(measured):
        return False
    if not (math.isnan(low) or math.isnan(high)) and low <= measured <= high:
        return True
    return _level_bin(measured, levels) == _level_bin(point, levels)


def _level_bin(x: float, levels) -> int:
    """Which stretch of load ``x`` lies in: 0 below the lowest level, i in [levels[i-1],
    levels[i]), len(levels) at or beyond the highest. crossover_point interpolates in
    [levels[i-1], levels[i]) where the speedup first falls below 1 at levels[i]."""
    return bisect.bisect_right([float(c) for c in levels], x)


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


# -- every arm at every level, predicted through vLLM's scheduler ----------------------------

#: plan["load"]["arms"] field -> this table's column, for the predicted side.
_PREDICTED = {"tpot_ms": "predicted_tpot_ms", "tpot_lo": "predicted_lo",
              "tpot_hi": "predicted_hi", "ttft_ms": "predicted_ttft_ms",
              "itl_ms": "predicted_itl_ms", "mean_running": "predicted_running"}
#: arm_latencies column -> this table's column, for the measured side.
_MEASURED = {"tpot_ms": "measured_tpot_ms", "tpot_lo": "measured_lo", "tpot_hi": "measured_hi",
             "mean_running": "measured_running"}
LOAD_COLUMNS = (["arm", "gamma", "concurrency", "held", "why"] + list(_PREDICTED.values())
                + list(_MEASURED.values()) + ["error_pct", "inside"])


def load_predictions(run: Run, seed: int = 0,
                     latencies: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per arm and level of ``plan["load"]``: the sealed prediction (median TPOT over requests
    with its 90 % interval, TTFT, ITL, time-weighted running batch) beside the measured median
    TPOT with its 95 % bootstrap interval (:func:`arm_latencies`, or ``latencies`` where the
    caller has them) and the measured running batch; the signed percent error of the median,
    and ``inside``: the measured median lies in the predicted interval. A level the prediction
    does not hold keeps its ``why`` and NaN predictions (``inside`` missing)."""
    lat = arm_latencies(run, seed) if latencies is None else latencies
    measured = lat.set_index(["arm", "concurrency"])
    rows = [_load_row(p, measured) for p in run.manifest["plan"]["load"]["arms"]]
    table = pd.DataFrame(rows, columns=LOAD_COLUMNS)
    table["inside"] = table["inside"].astype("boolean")
    return table


def _load_row(prediction: dict, measured: pd.DataFrame) -> dict:
    key = (prediction["arm"], int(prediction["concurrency"]))
    held = bool(prediction.get("held", True))
    row = {"arm": key[0], "gamma": int(prediction.get("gamma") or 0), "concurrency": key[1],
           "held": held, "why": None if held else (prediction.get("why") or "not held")}
    # a level not held has null numbers by the schema; NaN whatever it carries
    row.update({column: load_number(prediction.get(field)) if held else math.nan
                for field, column in _PREDICTED.items()})
    seen = measured.loc[key] if key in measured.index else {}
    row.update({column: float(seen[field]) if field in seen else math.nan
                for field, column in _MEASURED.items()})
    point, median = row["predicted_tpot_ms"], row["measured_tpot_ms"]
    known = not (math.isnan(point) or math.isnan(median))
    row["error_pct"] = float(percent_error(point, median)) if known else math.nan
    low, high = row["predicted_lo"], row["predicted_hi"]
    row["inside"] = (bool(low <= median <= high)
                     if known and not (math.isnan(low) or math.isnan(high)) else pd.NA)
    return row


def load_summary(table: pd.DataFrame) -> dict:
    """How far :func:`load_predictions` erred, in absolute percent over the arm-levels it
    predicted: per arm (``per_arm``: median, worst, levels, levels within the goal), overall
    (median, worst and where, how many within LOAD_GOAL_PCT, how many inside their interval),
    and the verdicts: ``every_level_within_goal`` (every arm-level within LOAD_GOAL_PCT),
    ``worst_within_cap`` (none beyond LOAD_WORST_PCT) and ``met``: every level predicted,
    every arm's median within LOAD_GOAL_PCT and the worst within LOAD_WORST_PCT."""
    scored = table[table["error_pct"].notna()].assign(abs_error=lambda t: t["error_pct"].abs())
    per_arm = scored.groupby("arm", sort=False)["abs_error"].agg(
        median_pct="median", worst_pct="max", levels="count",
        within_goal=lambda e: int((e <= LOAD_GOAL_PCT).sum())).reset_index()
    errors = scored["abs_error"]
    worst = scored.loc[errors.idxmax()] if len(scored) else None
    worst_pct = float(errors.max()) if len(scored) else math.nan
    return {"per_arm": per_arm, "n": len(scored), "n_not_held": int((~table["held"]).sum()),
            "n_within_goal": int((errors <= LOAD_GOAL_PCT).sum()),
            "n_inside": int(scored["inside"].fillna(False).sum()),
            "median_pct": float(errors.median()) if len(scored) else math.nan,
            "worst_pct": worst_pct,
            "worst_arm": None if worst is None else str(worst["arm"]),
            "worst_concurrency": None if worst is None else int(worst["concurrency"]),
            # nothing scored: the worst is NaN, which meets no bound
            "every_level_within_goal": bool(len(scored)) and bool((errors <= LOAD_GOAL_PCT).all()),
            "worst_within_cap": worst_pct <= LOAD_WORST_PCT,
            "met": (bool(table["held"].all()) and worst_pct <= LOAD_WORST_PCT
                    and bool((per_arm["median_pct"] <= LOAD_GOAL_PCT).all()))}


def anchored_errors(table: pd.DataFrame) -> pd.DataFrame:
    """A diagnostic made after the load, never sealed: each server's predictions scaled by its
    own miss at its lowest level (measured over predicted median), so that what remains at its
    higher levels is how the prediction's shape under load erred, not how fast that server's
    instance was (instances of one engine run apart by up to a fifth for their whole life: the
    step chapter). Rows of the levels above each server's lowest, ``anchored_error_pct``."""
    scored = table[table["error_pct"].notna()].sort_values(["arm", "concurrency"])
    parts = []
    for _, group in scored.groupby("arm", sort=False):
        lowest = group.iloc[0]
        scale = lowest["measured_tpot_ms"] / lowest["predicted_tpot_ms"]
        higher = group.iloc[1:]
        parts.append(higher.assign(anchored_error_pct=percent_error(
            higher["predicted_tpot_ms"] * scale, higher["measured_tpot_ms"])))
    return (pd.concat(parts, ignore_index=True) if parts
            else table.iloc[:0].assign(anchored_error_pct=pd.Series(dtype=float)))


def anchored_phrase(table: pd.DataFrame) -> str:
    """The sentence on :func:`anchored_errors` ('' without two levels of one server)."""
    anchored = anchored_errors(table)
    if anchored.empty:
        return ""
    errors, sealed = anchored["anchored_error_pct"].abs(), anchored["error_pct"].abs()
    reading = ("most of their miss was each server's own speed" if errors.median() <=
               sealed.median() / 2 else "the shape under load missed as well")
    return (f"Scaled by each server's own miss at its lowest level (a diagnostic made after "
            f"the load, not sealed), the predictions of the higher levels err a median "
            f"{errors.median():.1f} % against {sealed.median():.1f} % as sealed (worst "
            f"{errors.max():.1f} %): {reading}.")
