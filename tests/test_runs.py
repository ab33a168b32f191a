import json
import os
import stat

import pandas as pd
import pytest

from specbench.store import runs


def _manifest(**over):
    m = {"kind": "sweep", "sku": "cpu-test-1t-bfloat16", "code": {"revision": "abc"},
         "model": {"name": "m", "weights_sha256": "x", "tokenizer_sha256": "y"},
         "engine": {"name": "vllm-cpu", "version": "0", "settings": {}},
         "hardware": {}, "dtype": "bfloat16",
         "grid": {"gammas": [0], "batches": [1], "workloads": ["repeat"], "max_tokens": 8}}
    m.update(over)
    return m


def _cells():
    return pd.DataFrame([{c: 1 for c in runs.TABLE_COLUMNS["cells.csv"]}]).assign(
        workload="repeat", status="ok")


def test_create_write_finish_is_immutable(tmp_path):
    run = runs.create_run(tmp_path, _manifest())
    assert run.path.parent.name == "cpu-test-1t-bfloat16" and not run.complete
    run.write_part("g0-repeat-b1", {"status": "ok"})
    run.write_table("cells.csv", _cells())
    run.finish()
    reopened = runs.open_run(run.path)
    assert reopened.complete and reopened.manifest["finished_at"]
    with pytest.raises(PermissionError, match="never modified"):
        reopened.write_text("cells.csv", "x")
    # The mode bits, not os.access: root may write any file, and CI runs as root.
    writable = [p.name for p in run.path.rglob("*")
                if p.is_file() and p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)]
    assert not writable, f"a finished run left files writable: {writable}"
    assert reopened.table("cells.csv")["workload"].tolist() == ["repeat"]


def test_a_new_run_never_reuses_a_folder(tmp_path):
    a = runs.create_run(tmp_path, _manifest())
    b = runs.create_run(tmp_path, _manifest())
    assert a.path != b.path


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "t.txt"
    runs.atomic_write(target, "old")

    def boom(*_):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        runs.atomic_write(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["t.txt"]


def test_manifest_schema_error_names_file_and_field(tmp_path):
    run = runs.create_run(tmp_path, _manifest())
    data = json.loads((run.path / "manifest.json").read_text())
    data["engine"].pop("version")
    (run.path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(runs.RunSchemaError) as err:
        runs.open_run(run.path)
    assert "manifest.json" in str(err.value) and "engine" in str(err.value)
    assert "version" in str(err.value)


def test_table_error_names_file_and_column(tmp_path):
    bad = _cells().drop(columns="alpha")
    (tmp_path / "cells.csv").write_text(bad.to_csv(index=False))
    with pytest.raises(runs.RunSchemaError, match=r"cells.csv: missing column 'alpha'"):
        runs.read_table(tmp_path / "cells.csv")
    wrong = _cells().assign(pot_ms="fast")
    (tmp_path / "cells.csv").write_text(wrong.to_csv(index=False))
    with pytest.raises(runs.RunSchemaError, match=r"cells.csv: column 'pot_ms' row 2"):
        runs.read_table(tmp_path / "cells.csv")


def test_corrupt_part_is_named(tmp_path):
    run = runs.create_run(tmp_path, _manifest())
    (run.path / "parts").mkdir()
    (run.path / "parts" / "g0-open-b1.json").write_text("{half")
    with pytest.raises(runs.RunSchemaError, match="g0-open-b1.json"):
        run.parts()


def test_load_runs_skips_incomplete_and_filters_kind(tmp_path):
    done = runs.create_run(tmp_path, _manifest())
    done.finish()
    runs.create_run(tmp_path, _manifest())                  # still running
    other = runs.create_run(tmp_path, _manifest(kind="hostfloor"))
    other.finish()
    with pytest.warns(runs.IncompleteRunWarning, match="incomplete run"):
        assert [r.path for r in runs.load_runs(tmp_path, kind="sweep")] == [done.path]
    assert len(runs.load_runs(tmp_path, include_incomplete=True)) == 3
