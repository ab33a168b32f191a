"""The draft-model cost formulas: the in-engine c inverts the extended model, the per-position
α inverts Leviathan's tokens per step, and Leviathan's formula is the extended one with
d(γ) = γ·v."""
import pytest

from specbench.theory.draft_cost import (
    extended_speedup,
    in_engine_cost,
    per_position_alpha,
    step_cost_ratio,
)
from specbench.theory.economics import net_speedup, tokens_per_step


def test_the_in_engine_cost_is_what_the_extended_model_needs_to_give_the_measured_speedup():
    speedup = extended_speedup(2.4, 4, 0.03, 0.35)
    assert in_engine_cost(speedup, 2.4, 4, 0.03) == pytest.approx(0.35)
    assert step_cost_ratio(speedup, 2.4) == pytest.approx(1 + 0.03 + 4 * 0.35)


@pytest.mark.parametrize("alpha, gamma", [(0.1, 2), (0.5, 4), (0.93, 4)])
def test_the_per_position_alpha_gives_back_the_tokens_per_step(alpha, gamma):
    assert per_position_alpha(tokens_per_step(alpha, gamma), gamma) == pytest.approx(alpha,
                                                                                      abs=1e-6)


def test_per_position_alpha_at_its_ends():
    assert per_position_alpha(1.0, 4) == 0.0 and per_position_alpha(5.0, 4) == 1.0
    with pytest.raises(ValueError, match="tokens"):
        per_position_alpha(0.5, 4)


def test_leviathan_is_the_extended_model_with_d_equal_to_gamma_v():
    alpha, gamma, c, v = 0.6, 4, 0.3, 0.02
    assert net_speedup(alpha, gamma, c, v) == pytest.approx(
        extended_speedup(tokens_per_step(alpha, gamma), gamma, gamma * v, c))
