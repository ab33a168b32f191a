"""The operator's plan: for their own prompts on this host, which γ — or none — at each batch.

Inputs are two things measured apart: the host's step cost c(γ, b) from its `make book`
calibration (:mod:`specbench.derive.step_cost`), and acceptance on the operator's prompts from
one untimed pass at the largest γ (:mod:`specbench.measure.acceptance_pass`). The speedup over
no speculation is the host-unit model's, with acceptance measured instead of lent:

    speedup = D / (1 + s·c(γ, b))

D tokens per step and s the share of steps that draft. At batch 1 it is the harmonic mean of
the prompts' own speedups; at batch b > 1, where requests share steps, D and s are pooled over
the prompts (sums of tokens, drafts and steps), as the calibration's batch cells pool them.

**A smaller γ from the largest** (:func:`rates_at`). The counters give, per prompt, how many
drafts accepted position i (a_i), so the accepted length L of each draft at the pass's γ is
known. At γ' < γ a draft that emitted L + 1 tokens (L accepted, then the target's own) becomes
ceil((L+1)/(γ'+1)) steps that each draft — inside a copied run the n-gram match persists — and
emits the same tokens; steps without a draft are unchanged.

**The step cost where the calibration did not measure** (:func:`step_cost_at`). Between and
beyond the calibration's γ, c = d(γ) + host part, with d(γ) the microbenchmark's verify compute
where it has γ and the host part linear in γ through the two nearest measured γ (without a
microbenchmark, c itself is linear). Between and beyond the calibration's batches, c is linear
in b through the two nearest measured batches; beyond the largest that is an extrapolation the
calibration never checked, and the table says so (``gamma_basis``, ``batch_basis``).

**Interval**: the prompts resampled (bootstrap, 90 %), each draw at the largest and the
smallest step cost of the calibration's identifying cells at that (γ, b): what another set of
prompts like these and another calibration cell could give. Timing noise of the host beyond
that is not in it.
"""
from __future__ import annotations

import json
import math
import shlex

import numpy as np
import pandas as pd

from specbench.report.plan.gamma import fastest, recommend, recommend_by_speedup, relative_pot
from specbench.derive.step_cost import cell_step_costs, step_costs
from specbench.theory.counters import accepted_lengths

__all__ = ["rates_at", "measured_costs", "step_cost_at", "predict_plan", "recommend_per_batch",
           "static_gamma", "batch_schedule", "serve_command", "INTERVAL"]

INTERVAL = 0.90
DRAWS = 2000


def rates_at(rows: pd.DataFrame, gamma: int) -> pd.DataFrame:
    """Per prompt at ``gamma`` (≤ the pass's): tokens decoded, decode steps and drafting steps
    (module text), with ``divisor`` D and ``share`` s."""
    out = []
    for _, row in rows.iterrows():
        pass_gamma = int(row["gamma"])
        if gamma > pass_gamma:
            raise ValueError(f"γ={gamma} is above the pass's γ={pass_gamma}: acceptance at a "
                             "larger γ is not in its counters")
        counts = accepted_lengths(pass_gamma, int(row["drafts"]), row["accepted_per_pos"])
        lengths = np.arange(pass_gamma + 1)
        split = np.ceil((lengths + 1) / (gamma + 1))
        drafting = float((counts * split).sum())
        steps = float(row["decode_steps"]) - float(row["drafts"]) + drafting
        out.append({"request": row["request"], "decoded": float(row["decoded"]),
                    "steps": steps, "drafting": drafting})
    frame = pd.DataFrame(out, columns=["request", "decoded", "steps", "drafting"])
    frame["divisor"] = frame["decoded"] / frame["steps"]
    frame["share"] = frame["drafting"] / frame["steps"]
    return frame


def _line(points: dict[float, float], x: float) -> float:
    """The value at ``x`` on the straight line through the measured points that bracket it, or
    beyond them through the two nearest (the one point where only one was measured)."""
    xs = sorted(points)
    if x in points or len(xs) == 1:
        return points.get(x, points[xs[0]])
    below, above = [p for p in xs if p < x], [p for p in xs if p > x]
    x0, x1 = ((below[-1], above[0]) if below and above else
              (above[0], above[1]) if above else (below[-2], below[-1]))
    return points[x0] + (points[x1] - points[x0]) * (x - x0) / (x1 - x0)


def measured_costs(cells: pd.DataFrame, verify: pd.DataFrame | None) -> pd.DataFrame:
    """Per measured (γ, batch): c and the smallest and largest identifying cell's c, with d."""
    table = step_costs(cells, verify)
    spread = (cell_step_costs(cells).groupby(["gamma", "batch"])["c"]
              .agg(c_low="min", c_high="max").reset_index())
    return table.merge(spread, on=["gamma", "batch"])


def step_cost_at(costs: pd.DataFrame, verify: pd.DataFrame | None, gamma: int,
                 batch: int) -> dict:
    """c (and its low and high) at (γ, b), with the basis it rests on (module text)."""
    batches = sorted(costs["batch"].unique())
    at_batch = {}
    for b in batches:
        mine = costs[costs["batch"] == b].set_index("gamma")
        at_batch[b] = _over_gamma(mine, verify, b, gamma)
    values = {k: _line({b: at_batch[b][k] for b in batches}, batch)
              for k in ("c", "c_low", "c_high")}
    span = f"{batches[0]}–{batches[-1]}"
    by_batch = ("measured" if batch in batches else
                f"linear in batch inside {span}" if batches[0] < batch < batches[-1] else
                f"extrapolated linearly in batch beyond {span} (unchecked)")
    return {**{k: max(v, 0.0) for k, v in values.items()},
            "gamma_basis": at_batch[batches[0]]["how"], "batch_basis": by_batch}


def _over_gamma(mine: pd.DataFrame, verify: pd.DataFrame | None, batch: int,
                gamma: int) -> dict:
    measured = sorted(mine.index)
    if gamma in mine.index:
        return {k: float(mine.loc[gamma, k]) for k in ("c", "c_low", "c_high")} | {
            "how": "measured"}
    d = None
    if verify is not None and len(verify):
        rows = verify[(verify["batch"] == batch) & (verify["gamma"] == gamma)]
        t_base = float(mine["t_base_ms"].median())
        d = float(rows["delta_ms"].iloc[0]) / t_base if len(rows) else None
    where = ("between" if measured[0] < gamma < measured[-1] else "extrapolated from")
    if d is not None and mine["d"].notna().all():
        host = {k: _line({g: float(mine.loc[g, k] - mine.loc[g, "d"]) for g in measured}, gamma)
                for k in ("c", "c_low", "c_high")}
        return {k: d + v for k, v in host.items()} | {
            "how": f"d(γ={gamma}) from the microbenchmark + host part linear in γ "
                   f"{where} γ={', '.join(map(str, measured))}"}
    return {k: _line({g: float(mine.loc[g, k]) for g in measured}, gamma)
            for k in ("c", "c_low", "c_high")} | {
        "how": f"c linear in γ {where} γ={', '.join(map(str, measured))}"}


def _speedup(decoded, steps, drafting, c: float, batch: int) -> np.ndarray:
    """Speedups of prompt sets given as arrays (last axis: prompts; leading axes: draws)."""
    if batch == 1:
        per_prompt = (decoded / steps) / (1 + drafting / steps * c)
        return 1 / np.mean(1 / per_prompt, axis=-1)
    total = steps.sum(axis=-1)
    return (decoded.sum(axis=-1) / total) / (1 + drafting.sum(axis=-1) / total * c)


def predict_plan(rows: pd.DataFrame, cells: pd.DataFrame, verify: pd.DataFrame | None,
                 gammas, batches, draws: int = DRAWS, seed: int = 0) -> pd.DataFrame:
    """Per γ × batch: the predicted speedup over no speculation and its interval (module
    text), with the D, s and c behind it and the step cost's basis."""
    costs = measured_costs(cells, verify)
    if costs.empty:
        raise ValueError("the calibration has no 'repeat' or 'edit' cell with speculation to "
                         "measure this host's step cost from")
    samples = np.random.default_rng(seed).integers(0, len(rows), size=(draws, len(rows)))
    tail = (1 - INTERVAL) / 2
    out = []
    for g in gammas:
        rates = rates_at(rows, g)
        arrays = [rates[k].to_numpy(float) for k in ("decoded", "steps", "drafting")]
        drawn = [a[samples] for a in arrays]
        for b in batches:
            cost = step_cost_at(costs, verify, g, b)
            out.append({"gamma": g, "batch": b,
                        "speedup": float(_speedup(*arrays, cost["c"], b)),
                        "low": float(np.quantile(_speedup(*drawn, cost["c_high"], b), tail)),
                        "high": float(np.quantile(_speedup(*drawn, cost["c_low"], b),
                                                  1 - tail)),
                        "divisor": arrays[0].sum() / arrays[1].sum(),
                        "share": arrays[2].sum() / arrays[1].sum(), **cost})
    return pd.DataFrame(out)


def recommend_per_batch(table: pd.DataFrame) -> pd.DataFrame:
    """Per batch: the γ the one rule (:func:`specbench.report.plan.gamma.recommend`) picks from
    the predicted speedups — that of the highest, or 0 (speculation off) where none is above 1;
    ``certain`` where the interval lies wholly on the recommended side of 1."""
    rows = []
    for b, mine in table.groupby("batch"):
        pots = relative_pot(dict(zip(mine["gamma"], mine["speedup"], strict=True)))
        chosen = recommend(pots, 1.0)
        best = mine[mine["gamma"] == (chosen or fastest(pots))].iloc[0]
        on = chosen > 0
        rows.append({"batch": int(b), "gamma": int(best["gamma"]) if on else 0,
                     "speedup": float(best["speedup"]) if on else 1.0,
                     "low": float(best["low"]) if on else float("nan"),
                     "high": float(best["high"]) if on else float("nan"),
                     "best_gamma": int(best["gamma"]), "best_speedup": float(best["speedup"]),
                     "best_low": float(best["low"]), "best_high": float(best["high"]),
                     "certain": bool(best["low"] > 1 if on else best["high"] < 1),
                     "gamma_basis": best["gamma_basis"], "batch_basis": best["batch_basis"]})
    return pd.DataFrame(rows)


def static_gamma(table: pd.DataFrame) -> int:
    """One γ for a server whose load moves over the planned batches: the highest geometric mean
    of the predicted speedups over them, 0 where no γ's is above 1."""
    means = table.groupby("gamma")["speedup"].apply(lambda s: float(np.exp(np.log(s).mean())))
    return recommend_by_speedup(means.to_dict())


def batch_schedule(recommended: pd.DataFrame, max_num_seqs: int) -> list[list[int]] | None:
    """vLLM's ``num_speculative_tokens_per_batch_size``: each planned batch's γ from it up to
    the batch before the next planned one, the last through ``max_num_seqs``; None where
    speculation is off at every batch (serve without a speculative config)."""
    recs = recommended.sort_values("batch")
    if not (recs["gamma"] > 0).any():
        return None
    starts = [1, *recs["batch"].iloc[1:]]
    ends = [*[b - 1 for b in recs["batch"].iloc[1:]], max(max_num_seqs, recs["batch"].max())]
    schedule: list[list[int]] = []
    for a, z, g in zip(starts, ends, recs["gamma"], strict=True):
        if schedule and schedule[-1][2] == g:
            schedule[-1][1] = int(z)      # one range where neighbours plan the same γ
        else:
            schedule.append([int(a), int(z), int(g)])
    return schedule


def serve_command(model: str, dtype: str, gamma: int, settings: dict,
                  schedule: list[list[int]] | None = None,
                  max_num_seqs: int | None = None) -> str | None:
    """``vllm serve`` with the n-gram proposer at ``gamma`` and the calibration's window (and a
    batch-size schedule where given); None for γ = 0, which needs no speculative config."""
    if gamma <= 0:
        return None
    config = {"method": "ngram", "num_speculative_tokens": int(gamma),
              "prompt_lookup_min": int(settings.get("prompt_lookup_min", 2)),
              "prompt_lookup_max": int(settings.get("prompt_lookup_max", 4))}
    if schedule:
        config["num_speculative_tokens_per_batch_size"] = schedule
    parts = ["vllm", "serve", shlex.quote(model), "--dtype", dtype]
    if max_num_seqs:
        parts += ["--max-num-seqs", str(max_num_seqs)]
    return " ".join(parts + ["--speculative-config", shlex.quote(json.dumps(config))])


def rounded(value: float, places: int = 2) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.{places}f}"
