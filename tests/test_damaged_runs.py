"""Damaged runs meet the readers the book uses (load_runs, Run.table, analysis.sweep_cells,
analysis.manifest_table): each damage gets a RunSchemaError naming the file and the field —
never a KeyError deep in pandas, never a figure drawn from a silently shortened table — and an
incomplete run a warning naming it.

The store is written by the real sweep code with the stand-in engine (tests/standin_sweep.py),
then each case damages a copy of it.
"""
import json
import shutil
import stat

import pytest

from specbench.derive import analysis

from specbench.store import runs

from specbench.measure import sweep

import standin_sweep


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    base = tmp_path_factory.mktemp("store")
    model = standin_sweep.model_folder(base / "model")
    with pytest.MonkeyPatch.context() as mp:
        standin_sweep.install(mp)
        cfg = sweep.SweepConfig(model=str(model), gammas=(0, 2), batches=(1,), reps=2,
                                warmup=0, max_tokens=8, root=str(base / "runs"))
        run = sweep.run_sweep(cfg, progress=False)
    return run.path


@pytest.fixture
def store(pristine, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(pristine.parents[1], root)
    for p in root.rglob("*"):
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    (run_dir,) = [p.parent for p in root.glob("*/*/manifest.json")]
    return root, run_dir


def _edit_manifest(run_dir, change):
    data = json.loads((run_dir / "manifest.json").read_text())
    change(data)
    (run_dir / "manifest.json").write_text(json.dumps(data))


def _edit_csv(run_dir, name, change):
    path = run_dir / name
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(change(lines)))


def _replace_column(lines, column, value, row=1):
    header = lines[0].rstrip("\n").split(",")
    fields = lines[row].rstrip("\n").split(",")
    fields[header.index(column)] = value
    return lines[:row] + [",".join(fields) + "\n"] + lines[row + 1:]


def _drop_column(lines, column):
    i = lines[0].rstrip("\n").split(",").index(column)
    return [",".join(f for j, f in enumerate(line.rstrip("\n").split(",")) if j != i) + "\n"
            for line in lines]


DAMAGES = {
    "manifest is not JSON": (
        lambda d: (d / "manifest.json").write_text('{"kind": "sweep", "sku"'),
        r"manifest.json: not valid JSON"),
    "manifest is empty": (
        lambda d: (d / "manifest.json").write_text(""), r"manifest.json: not valid JSON"),
    "manifest is binary": (
        lambda d: (d / "manifest.json").write_bytes(b"\xff\xfe\x00garbage"),
        r"manifest.json: not valid JSON"),
    "manifest lacks model.name": (
        lambda d: _edit_manifest(d, lambda m: m["model"].pop("name")),
        r"manifest.json: field model: 'name' is a required property"),
    "manifest lacks grid.max_tokens": (
        lambda d: _edit_manifest(d, lambda m: m["grid"].pop("max_tokens")),
        r"manifest.json: field grid: 'max_tokens' is a required property"),
    "manifest lacks sku": (
        lambda d: _edit_manifest(d, lambda m: m.pop("sku")),
        r"manifest.json: field \(top level\): 'sku' is a required property"),
    "manifest has an unknown status": (
        lambda d: _edit_manifest(d, lambda m: m.update(status="done")),
        r"manifest.json: field status: 'done' is not one of"),
    "run folder without manifest": (
        lambda d: (d / "manifest.json").unlink(),
        r"manifest.json: missing — .* is not a run folder"),
    "cells.csv lacks a column": (
        lambda d: _edit_csv(d, "cells.csv", lambda ls: _drop_column(ls, "alpha")),
        r"cells.csv: missing column 'alpha'"),
    "cells.csv has text in a number column": (
        lambda d: _edit_csv(d, "cells.csv", lambda ls: _replace_column(ls, "pot_ms", "fast")),
        r"cells.csv: column 'pot_ms' row 2 is not a number: 'fast'"),
    "cells.csv has an empty measured value": (
        lambda d: _edit_csv(d, "cells.csv", lambda ls: _replace_column(ls, "alpha", "", 2)),
        r"cells.csv: column 'alpha' row 3 is empty"),
    "cells.csv has an unknown status": (
        lambda d: _edit_csv(d, "cells.csv", lambda ls: _replace_column(ls, "status", "maybe")),
        r"cells.csv: column 'status' row 2 is 'maybe'"),
    "cells.csv edited after closing": (
        lambda d: _edit_csv(d, "cells.csv", lambda ls: _replace_column(ls, "pot_ms", "1.5")),
        r"cells.csv: changed since the run closed"),
    "cells.csv is missing": (
        lambda d: (d / "cells.csv").unlink(), r"cells.csv: missing — the run"),
    "cells.csv is empty": (
        lambda d: (d / "cells.csv").write_text(""), r"cells.csv: not a readable CSV table"),
    "reps.csv cut mid-line": (
        lambda d: (d / "reps.csv").write_bytes((d / "reps.csv").read_bytes()[:-40]),
        r"reps.csv: truncated \(the last line ends without a newline\)"),
    "reps.csv cut at a line end": (
        lambda d: _edit_csv(d, "reps.csv", lambda ls: ls[:-1]),
        r"reps.csv: changed since the run closed"),
    "requests.csv cut mid-line": (
        lambda d: (d / "requests.csv").write_bytes((d / "requests.csv").read_bytes()[:-7]),
        r"requests.csv: truncated"),
    "requests.csv cut at a line end": (
        lambda d: _edit_csv(d, "requests.csv", lambda ls: ls[:-2]),
        r"requests.csv: changed since the run closed"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_each_damage_is_named_by_file_and_field(store, damage):
    root, run_dir = store
    damage_fn, message = DAMAGES[damage]
    damage_fn(run_dir)
    with pytest.raises(runs.RunSchemaError, match=message) as err:
        runs.load_runs(root)
        analysis.sweep_cells(root)                     # what every chapter calls first
        analysis.manifest_table(runs.load_runs(root))
        for table in sorted(run_dir.glob("*.csv")):  # any other reader of the run's tables
            runs.open_run(run_dir).table(table.name)
    text = str(err.value)
    assert "\n" not in text and str(run_dir) in text   # one line, naming the run's file


def test_an_incomplete_run_is_skipped_with_a_warning_naming_it(store):
    root, run_dir = store
    good = analysis.sweep_cells(root)
    _edit_manifest(run_dir, lambda m: m.update(status="running", finished_at=None))
    with pytest.warns(runs.IncompleteRunWarning, match=rf"{run_dir.name}.*--resume"):
        assert runs.load_runs(root) == []
    # beside a complete run, the complete one is still drawn
    twin = run_dir.parent / (run_dir.name + "-complete")
    shutil.copytree(run_dir, twin)
    _edit_manifest(twin, lambda m: m.update(status="complete", run_id=twin.name))
    with pytest.warns(runs.IncompleteRunWarning, match=run_dir.name):
        cells = analysis.sweep_cells(root)
    assert cells["run_id"].unique().tolist() == [twin.name] and len(cells) == len(good)


def test_a_hidden_folder_is_not_a_run(store):
    """A run being created lives under a hidden name until its manifest is in place."""
    root, run_dir = store
    (run_dir.parent / ".sweep-x.tmp").mkdir()
    assert len(runs.load_runs(root)) == 1


def test_runs_command_lists_a_damaged_run_instead_of_failing(store, capsys):
    from specbench.cli import main as cli
    root, run_dir = store
    (run_dir.parent / "stray").mkdir()
    assert cli.main(["runs", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "complete" in out and "damaged" in out and "no manifest.json" in out
