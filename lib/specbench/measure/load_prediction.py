"""Each load level's time per output token, predicted before the load runs: vLLM's own
scheduler decides what every step holds, this host's step-time model what it costs.

**How.** For each arm (speculation off, each fixed γ, the plan's schedule) and each closed-loop
level, :func:`specbench.engine.scheduler_sim.simulate_closed_loop` drives vLLM's scheduler with
the serving run's engine arguments and the operator's requests: their prompt lengths, and the
acceptance the plan's untimed pass read from the counters on those prompts (request i lends the
pass's prompt i, cycling where the load sends more prompts than the pass decoded). Every step is
then charged the step-time model's time (:mod:`specbench.theory.step_time`) plus the median
gap between two steps (the engine loop's own work; a probe's servers give one for servers that
speculate and one for those that do not), both from one of two sources on this host:
a short **serving probe** — a serving run on other prompts whose servers recorded their steps
(:func:`specbench.derive.serving_steps.fit_server`), what `make plan-under-load` uses — or,
without one, the `make book` **sweep**'s offline steps
(:func:`specbench.derive.step_fits.fit_run`; its median gap between two steps of one call). A
request's time per output token is (its finish − its first token) / (output tokens − 1), as
vLLM's benchmark client computes it; each level's median over requests is the prediction.

**Interval** (90 %): :data:`DRAWS` draws, each with the prompts' acceptance resampled (bootstrap
over the pass's prompts), a new draw of which steps draft, and the step-time coefficients drawn
from their fitted intervals (independently: the fit keeps no covariance). Host noise beyond the
model's is not in it.

**The plan's schedule from the running batch.** vLLM looks γ up by the number of requests it
schedules in a step, not by the client's concurrency. At each level the best fixed arm (the
lowest predicted time per output token) is taken with the running batch it is predicted to
hold; the schedule gives each level's γ to the batch sizes nearest its running batch (range
bounds half-way between neighbouring levels' running batches), and the plan arm is predicted
with that schedule through the same scheduler.

**Crossover**: where speculation off overtakes the best fixed γ
(:func:`specbench.theory.economics.crossover_point`), with the draws' interval.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbench.derive.engine_agreement import (
    SLOWER_BASE_PCT,
    base_over_speculative_pct,
    plain_steps,
)
from specbench.derive.serving_steps import fit_server
from specbench.derive.step_fits import fit_run
from specbench.derive.steps import step_table
from specbench.engine import scheduler_sim
from specbench.store.runs import Run
from specbench.theory.counters import accepted_lengths
from specbench.theory.economics import crossover_point
from specbench.theory.gamma_rule import recommend
from specbench.theory.step_time import StepTimeModel, design

__all__ = ["DEFAULT_LOAD_LEVELS", "DRAWS", "INTERVAL", "StepCost", "step_cost",
           "server_step_cost",
           "draft_profiles", "level_times", "schedule_from_running", "predict_load",
           "arm_name", "static_gamma"]

# The closed-loop concurrencies `make plan-under-load` serves.
DEFAULT_LOAD_LEVELS = (1, 2, 4, 8)
DRAWS = 20
INTERVAL = 0.90


@dataclass(frozen=True)
class StepCost:
    """Seconds per step: the step-time model plus the engine loop's gap between steps
    (``gap_s`` on a server that speculates, ``gap_off_s`` on one that does not: they differ,
    :func:`specbench.derive.serving_steps.fit_server`; None: the same)."""
    model: StepTimeModel
    gap_s: float
    calibration: str
    source: str = "sweep"          # "sweep" (offline steps) or "server" (a serving probe)
    gap_off_s: float | None = None

    def seconds(self, steps: pd.DataFrame, coef: np.ndarray | None = None,
                speculative: bool = True) -> np.ndarray:
        """Each step's seconds on a server with (``speculative``) or without a speculative
        config."""
        vector = self.vector() if coef is None else coef
        return design(steps, self.model.terms) @ vector + self.gap(speculative)

    def gap(self, speculative: bool = True) -> float:
        """The gap between two steps on a server with or without a speculative config."""
        return self.gap_s if speculative or self.gap_off_s is None else self.gap_off_s

    def vector(self) -> np.ndarray:
        return np.array([self.model.coef["s0"]] + [self.model.coef[t] for t in self.model.terms])

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        names = ["s0", *self.model.terms]
        se = np.array([(self.model.interval[n][1] - self.model.interval[n][0]) / (2 * 1.96)
                       for n in names])
        return self.vector() + rng.standard_normal(len(names)) * se

    def record(self) -> dict:
        return {"calibration": self.calibration, "source": self.source,
                "terms": list(self.model.terms), "coef": dict(self.model.coef),
                "gap_s": self.gap_s, "gap_off_s": self.gap(speculative=False)}


def server_step_cost(probe: Run) -> StepCost:
    """The step-time model of a serving run's own steps inside its levels and their median
    gap. ValueError (one line) for a run that is not a serving run or kept no step records."""
    if probe.manifest.get("kind") != "serving":
        raise ValueError(f"{probe.path / 'manifest.json'}: field kind: "
                         f"{probe.manifest.get('kind')!r}, not a serving run; a step-cost "
                         "probe is a `specbench serve-bench` run")
    fitted = fit_server(probe)
    if fitted is None:
        raise ValueError(f"{probe.path / 'step_records'}: the serving run kept no step records "
                         "inside its levels, so its servers' steps price nothing; serve again")
    model, gap_s, gap_off_s = fitted
    return StepCost(model, gap_s, probe.run_id, source="server", gap_off_s=gap_off_s)


def step_cost(calibration: Run) -> StepCost:
    """The calibration's step-time model and its median in-call gap between steps. ValueError
    (one line) for a calibration without step records or the step probe, or whose engines ran
    the same work at different speeds (:mod:`specbench.derive.engine_agreement`)."""
    model = fit_run(calibration)
    if model is None:
        raise ValueError(f"{calibration.path / 'manifest.json'}: field step_probe: the "
                         "calibration kept no step records or ran no step probe, so no "
                         "step-time model predicts the load; run `make book` again")
    table = step_table(calibration.path, calibration.parts(),
                       calibration.manifest.get("step_probe"))
    slower = base_over_speculative_pct(plain_steps(table))
    if slower > SLOWER_BASE_PCT:
        raise ValueError(
            f"{calibration.path / 'step_records'}: the γ=0 engine's plain step took "
            f"{slower:.0f} % longer than the speculative engines' (it "
            "does less): the engine instances ran at different speeds, so no step cost fitted "
            "to them predicts a server; measure again (`make measure`)")
    gaps = []
    for _, call in table[table["window"].notna()].groupby(["file", "window"]):
        call = call.sort_values("t_start_ns")
        gaps.append(call["t_start_ns"].to_numpy()[1:] - call["t_end_ns"].to_numpy()[:-1])
    gap = np.concatenate(gaps) if gaps else np.zeros(1)
    return StepCost(model, float(np.median(gap[gap >= 0])) / 1e9 if (gap >= 0).any() else 0.0,
                    calibration.run_id)


def draft_profiles(rows: pd.DataFrame, prompt_tokens: list[int],
                   pick: np.ndarray | None = None) -> list[scheduler_sim.DraftProfile]:
    """One profile per request of the load: its own prompt length, and the acceptance of pass
    row ``pick[i]`` (default: i, cycling over the pass's prompts)."""
    pick = np.arange(len(prompt_tokens)) % len(rows) if pick is None else pick
    out = []
    for tokens, index in zip(prompt_tokens, pick, strict=True):
        row = rows.iloc[int(index)]
        gamma, drafts = int(row["gamma"]), int(row["drafts"])
        counts = accepted_lengths(gamma, drafts, row["accepted_per_pos"])
        lengths = counts / counts.sum() if drafts else np.eye(gamma + 1)[0]
        start = drafts / max(float(row["decode_steps"]), 1.0)
        out.append(scheduler_sim.DraftProfile(int(tokens), min(start, 1.0), tuple(lengths)))
    return out


def level_times(load: scheduler_sim.SimulatedLoad, step_s: np.ndarray) -> dict:
    """Median time per output token, time to first token and step latency (ms) over the
    level's requests, and the time-weighted running batch."""
    ends = np.cumsum(step_s)
    starts = ends - step_s
    req = load.requests
    first, finish = ends[req["first_step"].to_numpy(int)], ends[req["finish_step"].to_numpy(int)]
    tokens = req["output_tokens"].to_numpy(float)
    tpot = (finish - first) / np.maximum(tokens - 1, 1)
    ttft = first - starts[req["arrival_step"].to_numpy(int)]
    rows = load.steps["rows"].to_numpy(float)
    return {"tpot_ms": float(np.median(tpot)) * 1e3, "ttft_ms": float(np.median(ttft)) * 1e3,
            "itl_ms": float(np.median(step_s)) * 1e3,
            "mean_running": float((rows * step_s).sum() / step_s.sum())}


def arm_name(gamma: int, schedule=None) -> str:
    return "plan" if schedule else ("off" if gamma == 0 else f"γ={gamma}")


class _Arm:
    """One server configuration: its scheduler config and KV blocks, built once."""

    def __init__(self, model: str, dtype: str, gamma: int, schedule, settings: dict):
        self.gamma, self.schedule = gamma, schedule
        self.name = arm_name(gamma, schedule)
        self.config = scheduler_sim.scheduler_config(model, dtype, gamma, schedule, settings)
        self.blocks = scheduler_sim.kv_blocks(self.config,
                                              float(settings.get("cpu_kvcache_gib", 2)))


def _predict_arm(arm: _Arm, rows: pd.DataFrame, prompt_tokens: list[int], level: int,
                 output_len: int, cost: StepCost, draws: int, seed: int) -> dict:
    record = {"arm": arm.name, "gamma": arm.gamma, "concurrency": int(level)}
    try:
        point = scheduler_sim.simulate_closed_loop(
            arm.config, arm.blocks, draft_profiles(rows, prompt_tokens), level, output_len,
            seed=seed)
    except scheduler_sim.LoadNotHeld as exc:
        return record | {"held": False, "why": str(exc)}
    rng = np.random.default_rng(seed)
    speculative = arm.gamma > 0          # the plan's arm too: its γ is its schedule's largest
    drawn = []
    for k in range(draws):
        pick = rng.integers(0, len(rows), len(prompt_tokens))
        sim = scheduler_sim.simulate_closed_loop(
            arm.config, arm.blocks, draft_profiles(rows, prompt_tokens, pick), level,
            output_len, seed=seed + 1 + k)
        drawn.append(level_times(sim, cost.seconds(sim.steps, cost.draw(rng), speculative)))
    tail = (1 - INTERVAL) / 2
    tpots = np.array([d["tpot_ms"] for d in drawn])
    return record | {"held": True, "why": None,
                     **level_times(point, cost.seconds(point.steps, speculative=speculative)),
                     "tpot_lo": float(np.quantile(tpots, tail)),
                     "tpot_hi": float(np.quantile(tpots, 1 - tail)),
                     "_draws": tpots}


def schedule_from_running(best: list[dict], max_num_seqs: int) -> list[list[int]] | None:
    """vLLM's ``num_speculative_tokens_per_batch_size`` from each level's best fixed arm and
    the running batch it is predicted to hold (module text); None where off is best at every
    level."""
    best = sorted(best, key=lambda b: b["running_batch"])
    if not any(b["gamma"] for b in best):
        return None
    bounds = [int(math.floor((a["running_batch"] + b["running_batch"]) / 2))
              for a, b in zip(best, best[1:], strict=False)]
    starts = [1, *[x + 1 for x in bounds]]
    ends = [*bounds, max_num_seqs]
    schedule: list[list[int]] = []
    for a, z, b in zip(starts, ends, best, strict=True):
        if z < a:
            continue                               # two levels at one running batch
        if schedule and schedule[-1][2] == b["gamma"]:
            schedule[-1][1] = z
        else:
            schedule.append([a, z, int(b["gamma"])])
    return schedule


def _crossover(arms: list[dict], levels, draws: int) -> dict:
    """Speculation off over the best fixed γ at each level, where it first falls below 1."""
    def envelope(key, width):
        out = []
        for c in levels:
            here = [a for a in arms if a["concurrency"] == c and a.get("held")
                    and a["arm"] != "plan"]
            off = [np.asarray(a[key], float) for a in here if a["gamma"] == 0]
            spec = [np.asarray(a[key], float) for a in here if a["gamma"] > 0]
            out.append(off[0] / np.min(np.array(spec), axis=0) if off and spec
                       else np.full(width, np.nan))
        return np.array(out, float).reshape(len(levels), width)
    x = np.array(levels, float)
    point = crossover_point(x, envelope("tpot_ms", 1)[:, 0])
    per_draw = envelope("_draws", draws)
    boot = [crossover_point(x, per_draw[:, k]) for k in range(draws)]
    low, high = np.quantile(np.array(boot), [(1 - INTERVAL) / 2, 1 - (1 - INTERVAL) / 2],
                            method="inverted_cdf")
    return {"point": point, "low": float(low), "high": float(high)}


def predict_load(model: str, dtype: str, settings: dict, rows: pd.DataFrame,
                 prompt_tokens: list[int], cost: StepCost, gammas, levels, output_len: int,
                 draws: int = DRAWS, seed: int = 0, progress=None) -> dict:
    """Every arm at every level (off, each γ, then the plan's schedule from the running batch),
    the schedule and the crossover: the plan's ``load`` record."""
    arms = []
    fixed = [_Arm(model, dtype, g, None, settings) for g in (0, *sorted(gammas))]
    for arm in fixed:
        for level in levels:
            arms.append(_predict_arm(arm, rows, prompt_tokens, level, output_len, cost, draws,
                                     seed))
            if progress is not None:
                progress.update()
    best = []
    for level in levels:
        here = {a["gamma"]: a for a in arms if a["concurrency"] == level and a["held"]}
        if 0 in here:
            top = here[recommend({g: a["tpot_ms"] for g, a in here.items()},
                                 here[0]["tpot_ms"])]
            best.append({"concurrency": int(level), "best_arm": top["arm"],
                         "gamma": top["gamma"], "running_batch": top["mean_running"]})
    max_seqs = int(settings.get("max_num_seqs", 8))
    schedule = schedule_from_running(best, max_seqs)
    if schedule:
        plan = _Arm(model, dtype, max(g for *_, g in schedule), schedule, settings)
        for level in levels:
            arms.append(_predict_arm(plan, rows, prompt_tokens, level, output_len, cost,
                                     draws, seed))
            if progress is not None:
                progress.update()
    else:                               # off at every level: the plan serves without drafts
        arms += [a | {"arm": "plan"} for a in arms if a["arm"] == "off"]
    crossover = _crossover(arms, list(levels), draws)
    for a in arms:
        a.pop("_draws", None)
    return {"levels": [int(c) for c in levels], "requests": len(prompt_tokens),
            "output_len": int(output_len), "step_model": cost.record(), "draws": draws,
            "basis": ("vLLM's v1 scheduler driven in-process with the server's engine "
                      "arguments; each step's time from this host's step-time model, fitted "
                      + ("to a serving probe's server steps" if cost.source == "server"
                         else "to the make book sweep's steps")
                      + "; acceptance from the plan's pass over the operator's prompts"),
            "arms": arms, "crossover": crossover, "schedule_from": best,
            "batch_schedule": schedule}


def static_gamma(load: dict) -> int:
    """One γ for every load (0: off): the fixed arm with the lowest geometric mean of its
    predicted time per output token over the levels all arms hold."""
    fixed = [a for a in load["arms"] if a["arm"] != "plan"]
    held = {c for c in load["levels"]
            if all(a["held"] for a in fixed if a["concurrency"] == c)}
    logs = {}
    for a in fixed:
        if a["concurrency"] in held:
            logs.setdefault(a["gamma"], []).append(math.log(a["tpot_ms"]))
    if 0 not in logs:
        return 0
    means = {g: math.exp(sum(v) / len(v)) for g, v in logs.items()}
    return recommend(means, means[0])
