"""The step-time model on the committed store: every probed host session is fitted, its check
run's steps are joined to their calls, and the chapter's goals are judged from those numbers.
And a run without step records is a clear one-line error on the command line."""
import subprocess
import sys

import numpy as np
import pytest

from specbench.derive.step_fits import check_cells, check_steps, session_fits
from specbench.store.runs import DEFAULT_ROOT


@pytest.mark.data
def test_every_probed_session_has_a_fit_with_identified_terms():
    fits = session_fits(DEFAULT_ROOT)
    assert fits, "no probed sweep with step records in the store"
    for fit in fits:
        assert fit.model.coef["s0"] > 0
        # The token terms, or the floor that replaces them (specbench.theory.step_time).
        floor = any(t.startswith("tokens_over_") for t in fit.model.terms)
        assert floor or {"draft_tokens", "prefill_tokens"} <= set(fit.model.terms), fit.session


@pytest.mark.data
def test_check_runs_are_predicted_step_by_step_and_cell_by_cell():
    steps, cells = check_steps(DEFAULT_ROOT), check_cells(DEFAULT_ROOT)
    assert len(steps) > 100 and np.isfinite(steps["error_pct"]).all()
    assert set(steps["step_class"]) >= {"pure decode", "decode with drafts"}
    assert set(cells["batch"]) == {1, 4}
    spec = cells[cells["gamma"] > 0]
    assert np.isfinite(spec["speedup_error_pct"]).all()


@pytest.mark.data
def test_a_sweep_without_step_records_is_one_line_and_exit_2():
    from specbench.store.runs import load_runs
    from specbench.derive.steps import has_step_records
    old = next(r for r in load_runs(DEFAULT_ROOT, kind="sweep") if not has_step_records(r.path))
    done = subprocess.run([sys.executable, "-m", "specbench.cli.main", "steps", str(old.path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no step records" in lines[0] and "make book" in lines[0]


@pytest.mark.data
def test_a_damaged_step_record_file_is_one_line_naming_it_and_exit_2(tmp_path):
    import shutil
    fit = session_fits(DEFAULT_ROOT)[0]
    source = next(p for p in DEFAULT_ROOT.rglob(fit.calibration) if p.is_dir())
    copy = tmp_path / source.parent.name / source.name
    shutil.copytree(source, copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    damaged = sorted((copy / "step_records").glob("*.jsonl"))[0]
    lines = damaged.read_text().splitlines()
    damaged.write_text("\n".join(lines[:3] + ['{"step": 2, "t_start_ns": "x"'] + lines[4:]))
    done = subprocess.run([sys.executable, "-m", "specbench.cli.main", "steps", str(copy)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and damaged.name in err[0] and "line 4" in err[0]


def test_the_step_error_figure_stays_below_altairs_row_limit_however_many_sessions():
    import pandas as pd
    from specbench.report.step_charts import MAX_POINTS, step_errors
    steps = pd.DataFrame({"session": [f"boot-{k}" for k in range(6) for _ in range(3000)],
                          "step_class": "pure decode", "duration_s": 0.03, "error_pct": 1.0,
                          "rows": 1, "gamma": 0})
    drawn = step_errors(steps).to_dict()["datasets"]
    (points,) = drawn.values()
    assert 0 < len(points) <= MAX_POINTS < 5000
    assert {p["session"] for p in points} == set(steps["session"])
