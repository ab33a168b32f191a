"""A sweep's step records joined to its calls by the calls' monotonic windows."""
import shutil
from pathlib import Path

import pandas as pd

from specbench.derive.steps import STEP_RECORDS, has_step_records, step_table

FIXTURE = Path(__file__).parent / "fixtures" / "step_records" / "steps-10415.jsonl"


def _starts():
    import json
    lines = FIXTURE.read_text().splitlines()[1:]
    return [json.loads(line)["t_start_ns"] for line in lines]


def _run(tmp_path):
    (tmp_path / STEP_RECORDS).mkdir()
    shutil.copy(FIXTURE, tmp_path / STEP_RECORDS / FIXTURE.name)
    return tmp_path


def test_each_step_is_given_the_call_whose_window_holds_it(tmp_path):
    run = _run(tmp_path)
    starts = _starts()
    # The fixture's engine runs γ=2: a spec call holding the first two steps, a base call on
    # another engine (γ 0) at the same time, which must take none of them.
    parts = {"edit-g2-b1": {"workload": "edit", "gamma": 2, "batch": 1, "calls": [
        {"arm": "spec", "rep": 0, "call": 0, "monotonic_ns": [starts[0] - 1, starts[1] + 1]},
        {"arm": "base", "rep": 0, "call": 1, "monotonic_ns": [starts[0] - 1, starts[-1] + 1]}]}}
    table = step_table(run, parts)
    assert has_step_records(run)
    assert list(table["arm"].iloc[:2]) == ["spec", "spec"]
    assert table["arm"].iloc[2:].isna().all()
    assert (table["duration_s"] > 0).all()


def test_a_run_without_step_records_gives_an_empty_table(tmp_path):
    assert not has_step_records(tmp_path)
    assert step_table(tmp_path, {}).empty
    assert isinstance(step_table(tmp_path, {}), pd.DataFrame)
