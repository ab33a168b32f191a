"""The planner's draft candidates (issue 47, item 6): each draft depth and batch a host's draft
sweeps measured, its best measured speedup, its acceptance against its break-even, and the
speculative config to paste."""
import json

import pytest

from specbench.cli.plan_prompts import _drafts_text
from specbench.report.plan.drafts import COLUMNS, draft_candidates, speculative_config

INTEL = "cpu-intel-xeon-f6m167-1t-bfloat16"   # the committed store's draft sweeps


def test_the_config_is_vllms_draft_model_config():
    config = json.loads(speculative_config("/models/draft-k4", 2))
    assert config == {"method": "draft_model", "model": "/models/draft-k4",
                      "num_speculative_tokens": 2}


def test_a_cpu_without_draft_sweeps_says_how_to_measure_them(tmp_path):
    assert list(draft_candidates("cpu-none", None, tmp_path).columns) == COLUMNS
    assert "make measure-drafts" in "\n".join(_drafts_text([]))


def test_a_draft_that_never_paid_is_named_with_its_break_even():
    row = {"depth": 4, "batch": 1, "gamma": 2, "speedup": 0.55, "best_any": 0.65,
           "alpha": 0.02, "break_even": 0.49, "candidate": False,
           "session_basis": "this host session", "draft_path": "/m/d",
           "speculative_config": speculative_config("/m/d", 2)}
    text = "\n".join(_drafts_text([row]))
    assert "not a candidate: per-position α 0.02 where it breaks even at 0.49" in text
    assert '"method": "draft_model"' in text


@pytest.mark.data
def test_the_committed_drafts_are_planned_from_their_sweeps(committed_store):
    table = draft_candidates(INTEL, None, committed_store)
    assert not table.empty
    assert set(table["batch"]) == {1, 4} and table["depth"].nunique() == 2
    assert table["draft_path"].notna().all()
    # The plan's verdict is the measurement's: a candidate exactly where a cell beat γ=0.
    assert (table["candidate"] == (table["speedup"] > 1)).all()
    assert ((table["alpha"] < table["break_even"]) | table["candidate"]
            | table["break_even"].isna()).all()


@pytest.mark.data
def test_table3_carries_each_measured_draft_beside_ngram(committed_store):
    from specbench.derive.drafts import table3
    from specbench.theory.economics import TABLE3_ALPHAS
    table = table3(committed_store)
    assert list(table.index) == list(TABLE3_ALPHAS)
    assert table.columns[0].startswith("n-gram") and len(table.columns) == 3
    # A draft pays a cost per drafted token that n-gram does not: below it at every α.
    assert table.iloc[:, 1:].lt(table.iloc[:, 0], axis=0).all().all()


@pytest.mark.data
def test_each_draft_sweep_is_priced_as_a_sweep_is(committed_store):
    from specbench.derive.drafts import draft_cells
    from specbench.report.plan.worksheet import draft_costs
    costs = draft_costs(committed_store)
    cells = draft_cells(committed_store)
    assert not costs.empty and set(costs["depth"]) == set(cells["depth"])
    # Whole replicas: a draft slower than the target alone never costs less.
    slower = cells.groupby(["run_id", "workload", "batch"])["speedup"].max() < 1
    priced = costs.set_index(["run_id", "workload", "batch"])["change_pct"]
    assert (priced[slower.reindex(priced.index).fillna(False)] >= 0).all()
