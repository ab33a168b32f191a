import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

from specbench.theory import errors, model

alphas = st.floats(0, 1)
gammas = st.integers(0, 16)
ds = st.floats(0, 0.5)


@given(gammas, ds)
def test_full_acceptance_limit_is_gamma_plus_one_over_one_plus_d(gamma, d):
    assert model.speedup(1.0, gamma, d) == pytest.approx((gamma + 1) / (1 + d))


@given(gammas, ds)
def test_zero_acceptance_limit_is_slightly_below_one(gamma, d):
    s = model.speedup(0.0, gamma, d)
    assert s == pytest.approx(1 / (1 + d))
    assert s <= 1.0


@given(alphas, st.integers(1, 16), st.floats(0.1, 100))
def test_acceptance_blind_model_ignores_alpha(alpha, gamma, t_base):
    # The textbook rival has no α input: its speedup is γ+1 whatever the acceptance.
    assert t_base / model.device_pass_latency(t_base, gamma) == pytest.approx(gamma + 1)
    assert model.speedup(alpha, gamma) <= gamma + 1 + 1e-12


@given(alphas, st.integers(1, 16), st.floats(0.1, 100), ds)
def test_alpha_from_timing_inverts_eq1(alpha, gamma, t_base, d):
    pot = model.per_token_latency(t_base, alpha, gamma, d)
    assert model.alpha_from_timing(pot, t_base, gamma, d) == pytest.approx(alpha, abs=1e-9)


def test_host_term_adds_per_cycle_cost():
    assert model.per_token_latency(10.0, 1.0, 4, 0.0, host_per_cycle=5.0) == pytest.approx(3.0)
    assert model.speedup(1.0, 4, 0.0, host_per_cycle_ratio=0.5) == pytest.approx(5 / 1.5)


def test_vectorised_over_numpy_and_pandas():
    a = np.array([0.0, 0.5, 1.0])
    out = model.per_token_latency(10.0, a, 4)
    assert isinstance(out, np.ndarray) and out.tolist() == pytest.approx([10, 10 / 3, 2])
    series = model.speedup(pd.Series([0.0, 1.0]), pd.Series([2, 6]))
    assert isinstance(series, pd.Series) and series.tolist() == [1.0, 7.0]
    assert isinstance(model.speedup(0.5, 2), float)


@pytest.mark.parametrize("call, name, value", [
    (lambda: model.per_token_latency(10, 1.5, 2), "alpha", "1.5"),
    (lambda: model.per_token_latency(10, -0.1, 2), "alpha", "-0.1"),
    (lambda: model.per_token_latency(10, 0.5, -1), "gamma", "-1"),
    (lambda: model.per_token_latency(0, 0.5, 2), "t_base", "0"),
    (lambda: model.per_token_latency(-3, 0.5, 2), "t_base", "-3"),
    (lambda: model.speedup(np.array([0.2, np.nan]), 2), "alpha", "nan"),
    (lambda: model.device_pass_latency(5, -2), "gamma", "-2"),
    (lambda: model.alpha_from_timing(1.0, 5.0, 0), "gamma", "0"),
    (lambda: errors.mape([1, 2], [1, 0]), "measured", "0"),
    (lambda: errors.percent_error([1, -2], [1, 1]), "predicted", "-2"),
])
def test_invalid_input_names_argument_and_value(call, name, value):
    with pytest.raises(ValueError) as err:
        call()
    assert name in str(err.value) and value in str(err.value)


def test_mape_and_percent_error():
    assert errors.percent_error(90.0, 100.0) == pytest.approx(-10.0)
    assert errors.mape([90, 110], [100, 100]) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        errors.mape([], [])


def test_a_missing_prediction_is_a_missing_error_not_a_cell():
    # 90 against 100 is −10 %, 130 against 100 is +30 %; the NaN prediction is no cell, so the
    # MAPE is (10 + 30) / 2 = 20, not (10 + 30) / 3.
    e = errors.percent_error(pd.Series([90.0, np.nan, 130.0]), pd.Series([100.0, 50.0, 100.0]))
    assert np.isnan(e[1]) and errors.mape_of(e) == pytest.approx(20.0)
    assert np.isnan(errors.mape_of([np.nan]))
    assert errors.mape_interval(e)[0] == errors.mape_of(e)


def test_mape_of_sums_as_pandas_does():
    # The chapters' numbers were pandas' Series.abs().mean(); the one function must not move
    # them by a bit, NaN cells included.
    rng = np.random.default_rng(7)
    e = pd.Series(rng.normal(0, 20, 300))
    e[rng.choice(300, 40, replace=False)] = np.nan
    assert errors.mape_of(e) == float(e.abs().mean())


def test_percent_change_is_the_same_arithmetic():
    assert errors.percent_change(110.0, 100.0) == errors.percent_error(110.0, 100.0) == \
        pytest.approx(10.0)
