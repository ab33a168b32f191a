"""How far a serving measurement repeats (report.plan.repeats) and the batch-4 goal per SKU
(report.host_evidence.batch4_goal), on small tables in the stores' formats."""
import math

import numpy as np
import pandas as pd
import pytest

from specbench.report.host_evidence import batch4_goal
from specbench.report.plan import repeats


class _Served:
    """A serving run as the repeats read it: a run id and its requests.csv."""

    def __init__(self, run_id: str, tpot: dict):
        self.run_id = run_id
        rows = [{"mode": "concurrency", "arm": arm, "level": level, "tpot_ms": ms + jitter}
                for (arm, level), ms in tpot.items() for jitter in (-0.5, 0.0, 0.5)]
        rows.append({"mode": "concurrency", "arm": "plan", "level": 1, "tpot_ms": 1.0})
        rows.append({"mode": "rate", "arm": "off", "level": 1, "tpot_ms": 99.0})
        self._requests = pd.DataFrame(rows)

    def table(self, name):
        assert name == "requests.csv"
        return self._requests


FIRST = _Served("serving-a", {("off", 1): 40.0, ("γ=2", 1): 30.0, ("off", 4): 35.0,
                              ("γ=2", 4): 36.0})
SECOND = _Served("serving-b", {("off", 1): 44.0, ("γ=2", 1): 30.0, ("off", 4): 37.0,
                               ("γ=2", 4): 36.0})


def test_fixed_medians_leave_out_the_plan_and_the_open_loop():
    medians = repeats.fixed_medians(FIRST)
    assert set(medians.index.get_level_values("arm")) == {"off", "γ=2"}
    assert medians[("off", 1)] == pytest.approx(40.0)


def test_spread_is_the_later_run_against_the_earlier():
    moved = repeats.spread([[FIRST, SECOND]]).set_index(["arm", "concurrency"])
    assert moved.loc[("off", 1), "moved_pct"] == pytest.approx(10.0)
    assert moved.loc[("γ=2", 4), "moved_pct"] == pytest.approx(0.0)


def test_repeat_regret_serves_one_runs_fastest_in_the_other():
    regret = repeats.repeat_regrets([[FIRST, SECOND]]).set_index(
        ["chosen_in", "concurrency"])
    # At concurrency 4 the first run's fastest is off (35 < 36); the second's is γ=2 (36 < 37).
    assert regret.loc[("serving-a", 4), "arm"] == "off"
    assert regret.loc[("serving-a", 4), "regret_pct"] == pytest.approx(100 * (37 / 36 - 1))
    assert regret.loc[("serving-b", 1), "regret_pct"] == pytest.approx(0.0)


def test_summary_without_a_repeat_is_empty_not_zero():
    summary = repeats.repeat_summary([])
    assert summary["groups"] == 0 and math.isnan(summary["spread_worst_pct"])


def _judged(sku, run, model, ratio):
    return pd.DataFrame({"sku": sku, "prediction_run": run, "batch": 4,
                         "model_speedup_err_pct": model, "ratio_speedup_err_pct": ratio})


def test_batch4_goal_needs_both_the_goal_and_beating_ratio_transfer():
    judged = pd.concat([_judged("a", "p1", [3.0, -4.0], [10.0, 12.0]),     # met
                        _judged("b", "p2", [2.0, 2.0], [1.0, 1.0]),        # below goal, loses
                        _judged("c", "p3", [9.0, 9.0], [20.0, 20.0]),      # beats, above goal
                        _judged("c", "p4", [4.0, 4.0], [8.0, 8.0])])       # another session met
    loso = pd.DataFrame({"sku": ["a", "b", "d"], "batch": 4, "model_err_pct": [4.0, 3.0, 1.0],
                         "ratio_err_pct": [20.0, 2.0, 5.0]})
    table = batch4_goal(judged, loso).set_index("sku")
    assert table.loc["a", "sealed met"] and table.loc["a", "held out met"]
    assert not table.loc["b", "sealed met"] and not table.loc["b", "held out met"]
    assert table.loc["c", "sealed met"] and table.loc["c", "sealed model %"] == 4.0
    assert np.isnan(table.loc["c", "held-out model %"]) and not table.loc["c", "held out met"]
    assert np.isnan(table.loc["d", "sealed model %"]) and table.loc["d", "held out met"]
