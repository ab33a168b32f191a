"""The closed-form per-output-token model of the host-amortization paper (its equation 1).

A draft-verify cycle proposes γ tokens and verifies γ+1 positions in one target forward pass.
It pays the per-step cost once and emits, on average, αγ+1 tokens, so

    pot(γ) = (t_base·(1 + d(γ)) + h) / (αγ + 1)                                   (eq. 1)

* ``t_base`` – the no-speculation (γ=0) decode step, measured directly;
* ``d(γ)``   – the extra device cost of verifying γ+1 rows instead of one (roofline, not fit);
* ``α``      – acceptance = accepted / drafted tokens, read from the engine's counters;
* ``h``      – an explicit per-cycle host term; 0 gives the paper's model, the paper names it
               as the next refinement.

Functions broadcast over numpy arrays and pandas Series and raise ``ValueError`` naming the
argument on invalid input (α outside [0, 1], γ < 0, non-positive latency, NaN). A prediction's
error against its measurement is :mod:`specbench.theory.errors`'s.
"""
from __future__ import annotations

from specbench.theory._validate import check, scalar_or_array

__all__ = [
    "per_token_latency",
    "speedup",
    "device_pass_latency",
    "alpha_from_timing",
]


def per_token_latency(t_base, alpha, gamma, d=0.0, host_per_cycle=0.0):
    """Eq. 1: per-output-token decode latency under speculation, in the unit of ``t_base``."""
    t_base = check("t_base", t_base, low=0, low_open=True)
    alpha = check("alpha", alpha, low=0, high=1)
    gamma = check("gamma", gamma, low=0)
    d = check("d", d, low=-1, low_open=True)
    host_per_cycle = check("host_per_cycle", host_per_cycle, low=0)
    return scalar_or_array((t_base * (1 + d) + host_per_cycle) / (alpha * gamma + 1))


def speedup(alpha, gamma, d=0.0, host_per_cycle_ratio=0.0):
    """t_base / pot(γ) = (αγ+1) / (1 + d + h/t_base).

    Limits: α→1 gives (γ+1)/(1+d); α=0 gives 1/(1+d) ≤ 1 — speculation that is never
    accepted still pays the verify overhead and saves nothing.
    """
    alpha = check("alpha", alpha, low=0, high=1)
    gamma = check("gamma", gamma, low=0)
    d = check("d", d, low=-1, low_open=True)
    host_per_cycle_ratio = check("host_per_cycle_ratio", host_per_cycle_ratio, low=0)
    return scalar_or_array((alpha * gamma + 1) / (1 + d + host_per_cycle_ratio))


def device_pass_latency(t_base, gamma):
    """The acceptance-blind textbook rival: t_base / (γ+1).

    It treats the target forward pass as the unit of cost and assumes every proposed token is
    accepted, so it predicts a (γ+1)× speedup whatever the acceptance — and fails on 'open'.
    """
    t_base = check("t_base", t_base, low=0, low_open=True)
    gamma = check("gamma", gamma, low=0)
    return scalar_or_array(t_base / (gamma + 1))


def alpha_from_timing(pot, t_base, gamma, d=0.0):
    """Eq. 1 inverted for α: (t_base·(1+d)/pot − 1) / γ.

    Kept only as the paper's circular cross-check. It infers acceptance from the very latency
    eq. 1 is meant to predict, so feeding it back into a prediction is a tautology: the
    "prediction" reproduces the measurement by construction, and any per-cycle host cost is
    silently absorbed into a lower α. Predictions must use the counter α
    (:class:`specbench.engine.counters.SpecCounters`). The result is not clipped to [0, 1]: values
    outside it are themselves a diagnostic.
    """
    pot = check("pot", pot, low=0, low_open=True)
    t_base = check("t_base", t_base, low=0, low_open=True)
    gamma = check("gamma", gamma, low=0, low_open=True)
    d = check("d", d, low=-1, low_open=True)
    return scalar_or_array((t_base * (1 + d) / pot - 1) / gamma)
