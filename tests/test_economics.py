import math

import pytest

from specbench.theory import economics as econ


@pytest.mark.parametrize("alpha, expected", [(0.7, 2.31), (0.6, 1.92), (0.8, 2.80)])
def test_published_speedups_at_c005_k4(alpha, expected):
    assert econ.net_speedup(alpha, 4, 0.05) == pytest.approx(expected, abs=0.005)


def test_verification_overhead_v025():
    assert econ.net_speedup(0.7, 4, 0.05, 0.25) == pytest.approx(1.26, abs=0.005)
    assert econ.net_speedup(0.5, 4, 0.05, 0.25) < 1.0


@pytest.mark.parametrize("v, expected", [(0.0, 0.17), (0.1, 0.38), (0.25, 0.58), (0.5, 0.78)])
def test_break_even_alpha_matches_the_worksheet(v, expected):
    # The worksheet quotes the first α on a 0.01 grid that breaks even (0.5737 -> 0.58).
    alpha = econ.break_even_alpha(4, 0.05, v)
    assert math.ceil(alpha * 100) / 100 == pytest.approx(expected)
    assert alpha == pytest.approx(expected, abs=0.01)
    assert econ.net_speedup(alpha, 4, 0.05, v) == pytest.approx(1.0, abs=1e-6)


def test_break_even_impossible_is_a_clear_error():
    with pytest.raises(ValueError, match="no acceptance breaks even"):
        econ.break_even_alpha(4, 1.0, 0.5)


def test_tokens_per_step_and_optimal_k():
    assert econ.tokens_per_step(1.0, 4) == 5
    assert econ.tokens_per_step(0.0, 4) == 1
    assert econ.optimal_k(0.5, 0.05) == 3          # the worksheet: α=0.5 peaks at k=3
    assert econ.optimal_k(0.9, 0.05, k_max=7) == 7  # still rising at k=7
    assert econ.net_speedup(0.5, 2, 0.10) == pytest.approx(1.46, abs=0.005)


def test_kv_capacity_loss_of_the_worked_example():
    without = econ.kv_capacity_tokens(65e9, 320 * 1024)
    with_draft = econ.kv_capacity_tokens(62.5e9, 352 * 1024)
    assert round(without, -3) == 198_000 and round(with_draft, -3) == 173_000
    assert 100 * (1 - with_draft / without) == pytest.approx(12.6, abs=0.05)


def test_whole_replicas_and_cost_per_million():
    assert econ.replicas_needed(20_000, 3_125) == 7
    replicas, cost = econ.cost_per_million(2, 4.0, 3_125, 20_000, 20_000)
    assert replicas == 7 and cost == pytest.approx(0.78, abs=0.005)


@pytest.mark.parametrize("args, field", [
    ((0, 4.0, 3125, 20000, 20000), "gpus_per_replica"),
    ((2, -1, 3125, 20000, 20000), "gpu_hour_usd"),
    ((2, 4.0, 3125, 20000, 25000), "actual_qualified_fleet_tokens_per_s"),
])
def test_cost_per_million_rejects_bad_inputs(args, field):
    with pytest.raises(ValueError, match=field):
        econ.cost_per_million(*args)


def test_measured_decode_speedup():
    assert econ.measured_decode_speedup(3.0, 1.2) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="mean_acceptance_length"):
        econ.measured_decode_speedup(0.5, 1.0)
