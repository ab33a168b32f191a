"""A sweep's engine instances must run the same work at the same speed: the γ=0 engine's plain
step (the least work) slower than the speculative engines' names the run, keeps it out of the
step fits, and stops a plan from calibrating on it."""
import numpy as np
import pandas as pd
import pytest

from specbench.derive.engine_agreement import (
    SLOWER_BASE_PCT,
    base_over_speculative_pct,
    plain_steps,
)
from specbench.derive.step_fits import engine_agreement, session_fits


def _steps(base_ms: float, speculative_ms: float) -> pd.DataFrame:
    rows = []
    for gamma, ms in ((0, base_ms), (2, speculative_ms), (6, speculative_ms)):
        rows += [{"engine_gamma": gamma, "decode_tokens": 1, "draft_tokens": 0,
                  "prefill_tokens": 0, "duration_ns": ms * 1e6}] * 5
        # steps that are not plain do not count, however slow
        rows += [{"engine_gamma": gamma, "decode_tokens": 4, "draft_tokens": 8,
                  "prefill_tokens": 512, "duration_ns": 900e6}] * 5
    return pd.DataFrame(rows)


def test_a_slower_base_engine_is_named_by_how_much():
    assert base_over_speculative_pct(plain_steps(_steps(60.0, 50.0))) == pytest.approx(20.0)
    assert base_over_speculative_pct(plain_steps(_steps(47.0, 50.0))) == pytest.approx(-6.0)
    assert np.isnan(base_over_speculative_pct(plain_steps(_steps(47.0, 50.0).query(
        "engine_gamma == 0"))))


@pytest.mark.data
def test_the_stored_sweeps_are_judged_and_disagreeing_ones_fit_nothing():
    table = engine_agreement()
    assert len(table) and table["run"].is_unique
    apart = set(table.loc[~table["engines_agree"], "run"])
    assert (table.loc[table["engines_agree"], "base_slower_pct"].dropna()
            <= SLOWER_BASE_PCT).all()
    for fit in session_fits():
        assert fit.calibration not in apart and not apart & set(fit.checks)
        assert set(fit.disagreeing) <= apart


@pytest.mark.data
def test_a_plan_refuses_a_calibration_whose_engines_disagree():
    from specbench.measure.load_prediction import step_cost
    from specbench.store.runs import load_runs
    table = engine_agreement()
    apart = table.loc[~table["engines_agree"], "run"]
    if apart.empty:
        pytest.skip("no stored sweep has engines that disagree")
    run = next(r for r in load_runs(kind="sweep") if r.run_id == apart.iloc[0])
    if not run.manifest.get("step_probe"):
        pytest.skip("the disagreeing sweep ran no step probe")
    with pytest.raises(ValueError, match="different speeds"):
        step_cost(run)
