"""What one engine step costs, as a function of what it holds.

The headline model charges a fixed t_base per step and one fitted term h for a drafting step.
That holds for one request; a step under load also holds other rows, their drafts, other
requests' prefill chunks, and reads a growing KV cache. The serving simulators of the field
model a step by what it holds (inference-sim: β0 + β1·prefill + β2·decode tokens); this adds the
drafted tokens and the context read:

    t_step = s0 + s_dec·(decode tokens) + s_draft·(drafted tokens)
                + s_pre·(prefill tokens) + s_kv·(context tokens read)              (STEP TIME)

The coefficients are named ``s_*`` (per step, per token) so they cannot be confused with the
headline model's h (extra host cost of a drafting step) or Leviathan's c (draft-to-target cost
ratio). ``s0 / t_step`` is the fixed share of a step: the paper's thesis is that it dominates at
small batches; where it stops dominating is what this model says.

Fitted by ordinary least squares to one host session's step records, with 95 % t-intervals
(least squares on relative errors was tried: it predicted a second run's steps worse; least
absolute deviations and Huber's loss were tried on the four sessions of 2026-12-07: they left
the largest per-class errors, 17 to 36 %, where they were, for those are shifts of a whole
class between two runs, not outliers). A
term whose column never varies in the records (no prefill in a pure-decode probe) is left out
and reported as unidentified, not guessed. A further term (:data:`EXTRA_TERMS`) enters only when
it lowers the held-out error by more than the records' own noise: the paired difference of
absolute held-out errors (blocked K-fold over steps in time order) must have a bootstrap
interval that excludes zero (:func:`specbench.theory.errors.mape_difference`); folds hold out
whole calls (:func:`_folds`).

Two kinds of further term come from how a CPU step is spent (measured on the Zen 4 of
2026-12-07, whose terms of (STEP TIME) alone missed a second run's drafted steps by 20 % and
its prefill steps by 25 %):

* **Attention pairs.** vLLM's CPU attention reads a row's KV once for each of its query tokens,
  so a row verifying γ drafts reads its context γ+1 times, and a prompt's new tokens after a
  cached prefix each read the prefix; ``context_tokens`` counts one read per row. The step
  records (version 2) count the query–key pairs of decode rows and of prefill rows apart.
* **A floor under the forward pass.** The weights are read once per step however many tokens
  it holds: below a few tokens the forward pass is memory-bound and an extra token costs
  almost nothing (four rows at short contexts stepped as fast as one), above them every token
  costs about the same, whatever its class. ``tokens_over_k`` = max(0, tokens − k) is that
  roofline's shape; it *replaces* the per-class token terms it generalises (:data:`REPLACES`),
  and its knee k is the one of :data:`FLOOR_KNEES` with the lowest held-out error (one
  candidate, :data:`ALTERNATIVES`: the admission test is then run on it alone).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specbench.theory.errors import mape_difference, mape_of, percent_error

__all__ = ["BASE_TERMS", "EXTRA_TERMS", "FLOOR_KNEES", "ALTERNATIVES", "REPLACES",
           "StepTimeModel", "fit_step_time", "design", "held_out_errors", "admit_terms",
           "step_class", "cell_steps", "decode_steps", "cell_pot", "predict_cells",
           "cells_speedup"]

#: The terms of (STEP TIME): column of the step records each multiplies.
BASE_TERMS = ("decode_tokens", "draft_tokens", "prefill_tokens", "context_tokens")
#: The knees tried for the forward pass's floor (tokens a step holds at no extra cost).
FLOOR_KNEES = (4, 8, 16)


def _column(r, name: str) -> np.ndarray:
    """A recorded column, or NaN where the records predate it (the term is then unidentified)."""
    return (np.asarray(r[name], dtype=float) if name in r
            else np.full(len(r), np.nan))


def _tokens(r) -> np.ndarray:
    """Every token a step computes: decode, drafts (padded slots included), prefill."""
    padded = np.asarray(r["draft_padded"], dtype=float) if "draft_padded" in r else 0.0
    return (np.asarray(r["decode_tokens"], dtype=float) + np.asarray(r["draft_tokens"], float)
            + padded + np.asarray(r["prefill_tokens"], dtype=float))


def _over(knee: int):
    """max(0, tokens − knee); a cell's mean step carries its expected value instead."""
    name = f"tokens_over_{knee}"
    return lambda r: (_column(r, name) if name in r
                      else np.maximum(_tokens(r) - knee, 0.0))
#: Candidates beyond (STEP TIME), each a function of the records (in this order). A drafting
#: step: a fixed
#: extra cost of any step that verifies drafts (the proposer's pass, the rejection sampler);
#: prefill squared: attention over a long prefill chunk.
EXTRA_TERMS = {
    # A step of an engine that speculates (γ > 0), drafts or not: the n-gram lookup runs on
    # every step of every row, and the sampler takes the speculative path.
    "speculating": lambda r: (r["gamma"] > 0).astype(float) if "gamma" in r
    else np.zeros(len(r)),
    # A cell's mean step (cell_steps) carries the expected value of the indicator instead.
    "drafting_step": lambda r: (r["drafting_step"] if "drafting_step" in r
                                else (r["draft_tokens"] > 0).astype(float)),
    "prefill_sq_k": lambda r: r["prefill_tokens"].astype(float) ** 2 / 1000.0,
    # Attention: thousands of query–key pairs of decode rows and of prefill rows (module text).
    "decode_kpairs": lambda r: _column(r, "decode_pairs") / 1000.0,
    "prefill_kpairs": lambda r: _column(r, "prefill_pairs") / 1000.0,
    **{f"tokens_over_{k}": _over(k) for k in FLOOR_KNEES},
}
#: A candidate tried in several forms, of which the one with the lowest held-out error is tested.
ALTERNATIVES = {"tokens_over_floor": tuple(f"tokens_over_{k}" for k in FLOOR_KNEES)}
#: Terms a candidate takes the place of when it enters (it generalises them).
REPLACES = {f"tokens_over_{k}": ("decode_tokens", "draft_tokens", "prefill_tokens")
            for k in FLOOR_KNEES}
#: The candidates in the order the admission rule tries them.
CANDIDATES = ("decode_kpairs", "prefill_kpairs", "tokens_over_floor", "speculating",
              "drafting_step", "prefill_sq_k")


@dataclass(frozen=True)
class StepTimeModel:
    """Fitted (STEP TIME): seconds per step as ``s0 + Σ coef·column``."""
    terms: tuple[str, ...]
    coef: dict[str, float]                 # "s0" and one per term, seconds per step / per unit
    interval: dict[str, tuple[float, float]]
    steps: int
    unidentified: tuple[str, ...] = field(default=())

    def predict(self, records: pd.DataFrame) -> np.ndarray:
        return design(records, self.terms) @ np.array([self.coef["s0"]] +
                                                      [self.coef[t] for t in self.terms])

    def fixed_share(self, records: pd.DataFrame) -> np.ndarray:
        """s0 / predicted t_step for each step: how much of the step is paid once per step."""
        return self.coef["s0"] / self.predict(records)


def design(records: pd.DataFrame, terms) -> np.ndarray:
    """The design matrix: a column of ones (s0) and one column per term."""
    columns = [np.ones(len(records))]
    for term in terms:
        values = EXTRA_TERMS[term](records) if term in EXTRA_TERMS else records[term]
        columns.append(np.asarray(values, dtype=float))
    return np.column_stack(columns)


def _identified(records: pd.DataFrame, terms) -> tuple[list[str], list[str]]:
    """The terms whose column varies in the records (a column the records lack is NaN)."""
    kept, dropped = [], []
    for term in terms:
        column = design(records, [term])[:, 1]
        varies = bool(np.isfinite(column).all() and np.ptp(column) > 0)
        (kept if varies else dropped).append(term)
    return kept, dropped


def fit_step_time(records: pd.DataFrame, terms=BASE_TERMS, level: float = 0.95
                  ) -> StepTimeModel:
    """OLS fit of (STEP TIME) to step records (``duration_s`` and the term columns)."""
    from scipy import stats
    if len(records) < len(terms) + 2:
        raise ValueError(f"a step-time fit needs more than {len(terms) + 1} steps, got "
                         f"{len(records)}")
    kept, dropped = _identified(records, terms)
    y = np.asarray(records["duration_s"], dtype=float)
    x = design(records, kept)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    dof = max(len(y) - x.shape[1], 1)
    sigma2 = float(((y - x @ coef) ** 2).sum() / dof)
    se = np.sqrt(np.diag(sigma2 * np.linalg.pinv(x.T @ x)))
    t = stats.t.ppf(0.5 + level / 2, dof)
    names = ["s0", *kept]
    return StepTimeModel(terms=tuple(kept), coef=dict(zip(names, map(float, coef), strict=True)),
                         interval={n: (float(c - t * s), float(c + t * s))
                                   for n, c, s in zip(names, coef, se, strict=True)},
                         steps=len(y), unidentified=tuple(dropped))


def _folds(records: pd.DataFrame, folds: int) -> list[np.ndarray]:
    """Held-out folds. Steps of one call share its rows, context and γ, so a call is held out
    whole: calls (the ``window`` column, the call's start on the step clock) are dealt to the
    folds in time order, round robin, so every fold holds every engine and every phase of the
    run. Records without calls: contiguous blocks in record order."""
    if "window" not in records:
        return np.array_split(np.arange(len(records)), folds)
    windows = pd.Series(records["window"].to_numpy())
    rank = windows.map({w: i for i, w in enumerate(sorted(windows.unique()))}).to_numpy()
    return [np.flatnonzero(rank % folds == k) for k in range(folds)]


def held_out_errors(records: pd.DataFrame, terms, folds: int = 5) -> np.ndarray:
    """Each step's percent error when predicted by a fit that did not see its call
    (:func:`_folds`)."""
    errors = np.full(len(records), np.nan)
    for block in _folds(records, folds):
        train = records.drop(records.index[block])
        model = fit_step_time(train, terms)
        test = records.iloc[block]
        errors[block] = percent_error(model.predict(test), test["duration_s"].to_numpy())
    return errors


def _with(terms: tuple[str, ...], candidate: str) -> tuple[str, ...]:
    """``terms`` with ``candidate`` added and the terms it replaces (:data:`REPLACES`) gone."""
    replaced = REPLACES.get(candidate, ())
    return (*(t for t in terms if t not in replaced), candidate)


def admit_terms(records: pd.DataFrame, base=BASE_TERMS, candidates=CANDIDATES
                ) -> tuple[tuple[str, ...], dict[str, dict]]:
    """The terms the records support: (STEP TIME)'s identified terms, plus each candidate whose
    held-out improvement's interval excludes zero (a candidate with :data:`ALTERNATIVES`: its
    form with the lowest held-out error). Returns the terms and, per candidate, the mean
    reduction of absolute held-out error (percentage points) with its interval."""
    terms = tuple(_identified(records, base)[0])
    before = held_out_errors(records, terms)        # the current terms', until one enters
    verdicts = {}
    for candidate in candidates:
        forms = _identified(records, ALTERNATIVES.get(candidate, (candidate,)))[0]
        if not forms:
            verdicts[candidate] = {"admitted": False,
                                   "why": "not recorded, or does not vary in the records"}
            continue
        trials = {form: held_out_errors(records, _with(terms, form)) for form in forms}
        form = min(trials, key=lambda f: mape_of(trials[f]))
        gain, low, high = mape_difference(before, trials[form])
        admitted = bool(np.isfinite(low) and low > 0)
        verdicts[candidate] = {"admitted": admitted, "gain_pp": gain, "interval": (low, high),
                               "form": form}
        if admitted:
            terms, before = _with(terms, form), trials[form]
    return terms, verdicts


def step_class(records: pd.DataFrame) -> pd.Series:
    """Each step's class for per-class errors: mixed (holds prefill), drafting, or decode."""
    return pd.Series(np.where(records["prefill_tokens"] > 0, "mixed with prefill",
                              np.where(records["draft_tokens"] > 0, "decode with drafts",
                                       "pure decode")), index=records.index)


def cell_steps(rows: int, gamma: int, drafting_share: float, accepted_per_step: float,
               prompt_tokens: float, output_tokens: float) -> pd.DataFrame:
    """The decode steps a cell of ``rows`` requests is made of, from its counters: each step
    decodes one token per row and verifies γ drafts on the drafting share of rows; a row emits
    1 + accepted tokens per step, so a request of ``output_tokens`` takes
    (output − 1)/(1 + accepted per step) steps after its first token, and its context grows
    from the prompt by that much each step."""
    per_step = 1.0 + accepted_per_step
    steps = max(int(round((output_tokens - 1) / per_step)), 1)
    return decode_steps(rows, gamma, drafting_share,
                        prompt_tokens + per_step * np.arange(steps))


def decode_steps(rows: int, gamma: int, drafting_share: float, context) -> pd.DataFrame:
    """Decode steps of ``rows`` rows, each verifying γ drafts on the drafting share of rows, at
    each context per row of ``context``: the columns every term reads."""
    context = np.asarray(context, dtype=float)
    # The model is linear in its columns, so a step with the mean composition has the mean
    # time: the drafting indicator enters as the chance that any of the rows drafts, and the
    # floor's columns as their expected values over how many rows draft.
    share = drafting_share if gamma > 0 else 0.0
    drafting = 1.0 - (1.0 - share) ** rows if gamma > 0 else 0.0
    # A row's pairs: q·context + q(q+1)/2 for its q = 1 (no drafts) or γ + 1 query tokens.
    tokens_per_row = 1.0 + gamma * share
    own = share * (gamma + 1) * (gamma + 2) / 2 + (1.0 - share)
    return pd.DataFrame({"gamma": gamma, "decode_tokens": float(rows),
                         "draft_tokens": rows * gamma * share, "draft_padded": 0.0,
                         "drafting_step": drafting,
                         "prefill_tokens": 0.0, "context_tokens": rows * context,
                         "decode_pairs": rows * (tokens_per_row * context + own),
                         "prefill_pairs": 0.0,
                         **{f"tokens_over_{k}": _expected_over(rows, gamma, share, k)
                            for k in FLOOR_KNEES}})


def _expected_over(rows: int, gamma: int, share: float, knee: int) -> float:
    """E[max(0, rows + γ·K − knee)] for K ~ Binomial(rows, share) drafting rows."""
    from math import comb
    return float(sum(comb(rows, k) * share ** k * (1 - share) ** (rows - k)
                     * max(rows + gamma * k - knee, 0) for k in range(rows + 1)))


def cell_pot(model: StepTimeModel, steps: pd.DataFrame, tokens_per_step: float) -> float:
    """Predicted time per output token of one request: the mean step over the tokens one row
    emits per step."""
    return float(model.predict(steps).mean() / tokens_per_step)


def predict_cells(model: StepTimeModel, cells: pd.DataFrame, output_tokens: int
                  ) -> pd.DataFrame:
    """Each cell's predicted time per output token (``pot_s``) from the steps it is made of
    (:func:`cell_steps`; its counters' tokens per step and drafting share), and its speedup
    over its own workload and batch's γ=0 cell predicted the same way."""
    out = cells[["workload", "gamma", "batch"]].copy()
    out["pot_s"] = [
        cell_pot(model, cell_steps(int(c.batch), int(c.gamma), float(c.drafting_share),
                                   float(c.emitted_per_step) - 1.0, float(c.prompt_tokens),
                                   output_tokens), float(c.emitted_per_step))
        for c in cells.itertuples()]
    base = out[out["gamma"] == 0].set_index(["workload", "batch"])["pot_s"]
    out["speedup"] = [base.get((w, b), np.nan) / p
                      for w, b, p in zip(out["workload"], out["batch"], out["pot_s"], strict=True)]
    return out


def cells_speedup(model: StepTimeModel, pairs, gamma: int, batch: int, prompt_tokens: float,
                  output_tokens: int) -> float:
    """A cell's speedup over its γ=0 cell from their steps, for prompts given as (tokens per
    step, drafting share) pairs (acceptance lent per prompt): per prompt the γ=0 cell's time
    per token over the γ cell's (:func:`cell_steps`, ``batch`` rows), then the harmonic mean
    over prompts, as a cell's speedup averages its requests' times."""
    base = cell_pot(model, cell_steps(batch, 0, 0.0, 0.0, prompt_tokens, output_tokens), 1.0)
    per_prompt = [base / cell_pot(model, cell_steps(batch, gamma, share, tokens - 1.0,
                                                    prompt_tokens, output_tokens), tokens)
                  for tokens, share in pairs]
    return float(1 / np.mean(1 / np.array(per_prompt)))
