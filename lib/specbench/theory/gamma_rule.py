"""The one γ rule: the γ with the lowest predicted latency, or speculation off (0) unless one is
strictly faster than no speculation. Every choice of γ in the project goes through it —
``specbench plan`` (explicit numbers, runs, own prompts), the planning chapter, the regret
table's planners and the load prediction (:mod:`specbench.measure.load_prediction`) — so
changing the rule here changes every one of them (``tests/test_one_rule.py`` checks that no
other function chooses γ by a rule of its own). It lives in the theory layer so that the
measure and report layers can both call it."""
from __future__ import annotations

import math

__all__ = ["TIE_RTOL", "recommend", "fastest", "relative_pot", "recommend_by_speedup"]

# Two predicted latencies closer than this (relative) are a tie: eq. 1 with a compute-bound
# d(γ) ∝ γ gives the same pot at several γ, equal up to the last bits of a float.
TIE_RTOL = 1e-9


def recommend(pot_by_gamma: dict[int, float], t_base: float) -> int:
    """The γ with the lowest pot; 0 unless it is strictly below ``t_base``; ties → smaller γ.

    The one γ rule: ``specbench plan`` (explicit numbers and runs), the planning chapter, the
    planner of the regret table and the own-prompts plan (:func:`recommend_by_speedup`) all
    choose with it, so changing the rule here changes every one of them."""
    best_gamma, best_pot = 0, float(t_base)
    for gamma in sorted(g for g in pot_by_gamma if g > 0):
        pot = float(pot_by_gamma[gamma])
        if pot < best_pot and not math.isclose(pot, best_pot, rel_tol=TIE_RTOL):
            best_gamma, best_pot = gamma, pot
    return best_gamma


def fastest(pot_by_gamma: dict[int, float]) -> int:
    """The rule without its option of speculation off: the γ > 0 with the lowest pot (what
    :func:`recommend` would run were speculation always on), ties → smaller γ."""
    return recommend(pot_by_gamma, math.inf)


def relative_pot(speedup_by_gamma: dict[int, float]) -> dict[int, float]:
    """Speedups over speculation off as pot relative to t_base: a speedup s is a pot of
    t_base/s, so 1/s against a t_base of 1."""
    return {int(g): 1.0 / float(s) for g, s in speedup_by_gamma.items()}


def recommend_by_speedup(speedup_by_gamma: dict[int, float]) -> int:
    """:func:`recommend` for predictions stated as speedups over speculation off."""
    return recommend(relative_pot(speedup_by_gamma), 1.0)
