"""What a draft model costs inside a speculative step, and the speedups each formula predicts.

Two cost ratios, kept apart on purpose:

* Leviathan's c: the draft run alone, as its own engine, over the target run alone — one draft
  step over one target step, each with its own scheduler, sampler and host cost;
* the in-engine c: what a drafting step actually pays per drafted token. From a cell's measured
  speedup S and its tokens per step L (the counters), the step costs r = L / S baseline steps
  (the economics source's measured path); the verify step's growth d(γ) (the model's roofline)
  accounts for r's first 1 + d(γ), and the rest, spread over γ drafted tokens, is

      c_engine = (L / S − 1 − d(γ)) / γ                                         (IN-ENGINE c)

  Were a draft pass inside the target's step to share the step's scheduler and host cost,
  c_engine would fall below c; where the proposer adds work of its own per step (preparing
  the draft's inputs, a first pass over the tokens just verified), it rises above it. The
  draft chapter reports which, per depth and γ.

The model extended: a drafting step costs the verify step plus γ draft passes,

      speedup = L / (1 + d(γ) + γ·c)                                           (EXTENDED)

Leviathan et al.'s formula is the same with L from a per-position α, (1 − α^(γ+1)) / (1 − α),
and d(γ) = γ·v; with v = 0 it leaves out the verify step's growth. The rival without the draft
term (c = 0) is the model the n-gram chapters use.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from specbench.theory._validate import check
from specbench.theory.economics import tokens_per_step

__all__ = ["in_engine_cost", "step_cost_ratio", "extended_speedup", "per_position_alpha",
           "split_draft_cost"]


def step_cost_ratio(speedup, tokens_per_step):
    """A drafting step's time over the baseline step: L / S."""
    return np.asarray(tokens_per_step, dtype=float) / np.asarray(speedup, dtype=float)


def in_engine_cost(speedup, tokens, gamma, d):
    """(IN-ENGINE c): the extra step cost per drafted token beyond the verify step's growth,
    in baseline steps."""
    gamma = np.asarray(gamma, dtype=float)
    return (step_cost_ratio(speedup, tokens) - 1.0 - np.asarray(d, dtype=float)) / gamma


def extended_speedup(tokens, gamma, d, c):
    """(EXTENDED): L / (1 + d(γ) + γ·c)."""
    return np.asarray(tokens, dtype=float) / (1.0 + np.asarray(d, dtype=float)
                                              + np.asarray(gamma, dtype=float)
                                              * np.asarray(c, dtype=float))


def per_position_alpha(tokens: float, gamma: int) -> float:
    """The per-position α whose independent acceptances give ``tokens`` per step at γ: the
    α Leviathan's formula takes, read from the counters' mean tokens per step (never the
    aggregate accepted/drafted fraction, which the economics source warns against)."""
    tokens = float(check("tokens", tokens, low=1.0))
    if tokens >= gamma + 1:
        return 1.0
    if tokens <= 1.0:
        return 0.0
    return float(brentq(lambda a: tokens_per_step(a, gamma) - tokens, 0.0, 1.0 - 1e-12,
                        xtol=1e-9))


def split_draft_cost(gammas, costs) -> tuple[float, float]:
    """The drafting part of a step, γ·c_engine, split into a part paid once per drafting step
    and a part per drafted token: least squares of γ·c = F + p·γ over the γ given. Two γ
    give an exact split (nothing is left to test it on); returns (F, p) in baseline steps."""
    gammas = np.asarray(gammas, dtype=float)
    drafting = gammas * np.asarray(costs, dtype=float)
    if len(np.unique(gammas)) < 2:
        raise ValueError("splitting the draft cost needs cells at two γ or more")
    per_token, fixed = np.polyfit(gammas, drafting, 1)
    return float(fixed), float(per_token)
