"""How a sweep ends when it does not end well: killed at any point, interrupted with Ctrl-C,
the disk full, every cell failing. The engine is the stand-in of tests/standin_sweep.py (the
bookkeeping is what is tested; tests/test_engine.py kills and interrupts the real engine).

Kills land where they are meant to through the fault points of :mod:`specbench.store.faults`
(``SPECBENCH_FAULT=<point>[@n][=kill|sigint]``), not through timers.
"""
import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import specbench
from specbench.derive import analysis
from specbench.cli import main as cli
from specbench.store import runs
from specbench.measure import sweep
from specbench.store.runs import open_run

import standin_sweep

HERE = Path(__file__).resolve().parent
GRID = ["--gammas", "0,2,4", "--batches", "1,4", "--workloads", "repeat,open", "--reps", "2",
        "--warmup", "0", "--max-tokens", "8"]
# Units of work (parts): two workloads × two batches, each timing γ=0 (the shared base), γ=2
# and γ=4 round-robin.
CELLS = 4
TABLE_CELLS = 12  # cells.csv: γ=2 and γ=4 of each unit, and the γ=0 row from its base calls


def _env(**extra):
    env = {**os.environ, **extra}
    # The child imports the same specbench as this test, whatever is installed.
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(specbench.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    env.pop("SPECBENCH_FAULT", None) if "SPECBENCH_FAULT" not in extra else None
    return env


def _standin(args, **env):
    return subprocess.run([sys.executable, str(HERE / "standin_sweep.py"), *args],
                          capture_output=True, text=True, timeout=120, env=_env(**env),
                          start_new_session=True)


def _parts(run_dir: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted((run_dir / "parts").glob("*.json"))}


@pytest.fixture
def model(tmp_path):
    return standin_sweep.model_folder(tmp_path / "model")


# point, parts finished before the kill, whether a half-written file is left behind
KILLS = [
    ("after-engine-start", 0, False),      # the first engine is up, no cell yet
    ("mid-cell@2", 1, False),              # in the second cell, after its warmup
    ("during-part-write@3", 2, True),      # half of the third part is on disk
    ("during-finalize", CELLS, False),     # reps.csv written, cells.csv not yet
]


@pytest.mark.parametrize("fault, parts_before, half_file", KILLS)
def test_sigkill_at_each_point_then_resume_completes(tmp_path, model, fault, parts_before,
                                                     half_file):
    root = tmp_path / "runs"
    killed = _standin(["sweep", *GRID, "--model", str(model), "--root", str(root)],
                      SPECBENCH_FAULT=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (run_dir,) = [m.parent for m in root.glob("*/*/manifest.json")]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    before = _parts(run_dir)
    assert len(before) == parts_before
    for blob in before.values():
        json.loads(blob)                          # every finished part is whole
    leftovers = list(run_dir.rglob(".*.tmp"))
    assert bool(leftovers) == half_file
    for tmp in leftovers:                         # the half-written file is never read
        with pytest.raises(json.JSONDecodeError):
            json.loads(tmp.read_text())
    assert open_run(run_dir).parts().keys() == {k.removesuffix(".json") for k in before}
    assert not (run_dir / "cells.csv").exists()
    with pytest.warns(runs.IncompleteRunWarning, match=run_dir.name):
        assert runs.load_runs(root) == []

    resumed = _standin(["sweep", "--resume", str(run_dir)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = _parts(run_dir)
    assert {k: after[k] for k in before} == before    # finished cells are not redone
    assert len(after) == CELLS and not list(run_dir.rglob(".*.tmp"))
    run = open_run(run_dir)
    assert run.complete and len(run.table("cells.csv")) == TABLE_CELLS
    assert (run.table("cells.csv")["status"] == "ok").all()
    # units × γ>0 cells × arms (the shared base under each of its cells) × reps
    assert len(run.table("reps.csv")) == CELLS * 2 * 2 * 2


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path, model):
    root = tmp_path / "runs"
    stopped = _standin(["sweep", *GRID, "--model", str(model), "--root", str(root)],
                       SPECBENCH_FAULT="mid-cell@3=sigint")
    (run_dir,) = [m.parent for m in root.glob("*/*/manifest.json")]
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    assert "Traceback" not in stopped.stderr
    assert f"Resume with: specbench sweep --resume {run_dir}" in stopped.stderr
    assert "2 of 4 units (a workload and batch, every γ) kept" in stopped.stderr
    assert len(_parts(run_dir)) == 2 and not list(run_dir.rglob(".*.tmp"))
    resumed = _standin(["sweep", "--resume", str(run_dir)])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert open_run(run_dir).complete


def test_sigterm_is_handled_like_ctrl_c(tmp_path, model):
    """`kill PID` (SIGTERM) stops the sweep the same clean, resumable way."""
    root = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-c",
                             "import os, signal, sys, runpy; from specbench.store import faults\n"
                             "faults.point = lambda name, _p=faults.point: ("
                             "os.kill(os.getpid(), signal.SIGTERM) if name == 'mid-cell' "
                             "else None)\n"
                             f"sys.argv = ['standin_sweep.py', 'sweep', *{GRID!r}, '--model', "
                             f"{str(model)!r}, '--root', {str(root)!r}]\n"
                             f"runpy.run_path({str(HERE / 'standin_sweep.py')!r}, "
                             "run_name='__main__')"],
                            env=_env(), stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Resume with: specbench sweep --resume" in err and "Traceback" not in err


@pytest.mark.parametrize("victim, parts_kept", [(".g2+4-open-b4.json.", 3),
                                                (".cells.csv.", CELLS)])
def test_full_disk_names_the_file_and_keeps_earlier_parts(tmp_path, model, monkeypatch,
                                                          victim, parts_kept, capsys):
    standin_sweep.install(monkeypatch)
    real_fdopen = os.fdopen

    def fdopen(fd, mode="r", *args, **kwargs):
        f = real_fdopen(fd, mode, *args, **kwargs)
        if victim not in Path(os.readlink(f"/proc/self/fd/{fd}")).name:
            return f
        return _HalfThenFull(f)
    monkeypatch.setattr(os, "fdopen", fdopen)
    root = tmp_path / "runs"
    status = cli.main(["sweep", *GRID, "--model", str(model), "--root", str(root)])
    err = capsys.readouterr().err
    (run_dir,) = [m.parent for m in root.glob("*/*/manifest.json")]
    target = victim.strip(".").removesuffix(".")
    assert status == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("specbench: error:") and err.count("error:") == 1
    assert "Traceback" not in err
    assert "No space left on device" in last and target in last
    assert f"specbench sweep --resume {run_dir}" in last
    assert not list(run_dir.rglob(".*.tmp"))               # nothing half-written stays
    assert not list(run_dir.rglob(target))
    parts = _parts(run_dir)
    assert len(parts) == parts_kept and all(json.loads(b) for b in parts.values())
    monkeypatch.setattr(os, "fdopen", real_fdopen)         # space again: resume completes
    assert cli.main(["sweep", "--resume", str(run_dir)]) == 0
    assert open_run(run_dir).complete and _parts(run_dir).items() >= parts.items()


class _HalfThenFull:
    """Writes half of what it is given to the real file, then fails like a full disk."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[:len(data) // 2])
        self._f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def test_every_cell_failing_still_closes_the_run_with_each_cause(tmp_path, model, monkeypatch):
    standin_sweep.install(monkeypatch)
    monkeypatch.setenv("STANDIN_FAIL", "start")
    cfg = sweep.SweepConfig(model=str(model), gammas=(0, 2, 4), batches=(1,), reps=1, warmup=0,
                            max_tokens=8, root=str(tmp_path / "runs"))
    run = sweep.run_sweep(cfg, progress=False)
    assert run.complete
    cells = run.table("cells.csv")
    assert len(cells) == 4 and (cells["status"] == "failed").all()
    assert cells["error"].str.contains("RuntimeError: stand-in engine for γ=").all()
    assert run.table("reps.csv").empty
    with pytest.warns(UserWarning, match="no successful cell"):
        with pytest.raises(FileNotFoundError, match="no complete sweep run"):
            analysis.sweep_cells(tmp_path / "runs")


def test_cli_lists_each_failed_cell_and_exits_1(tmp_path, model):
    out = _standin(["sweep", *GRID, "--model", str(model), "--root", str(tmp_path / "runs")],
                   STANDIN_FAIL="start")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "8 of 8 cells failed" in out.stderr   # γ=2 and γ=4 of each of the four units
    assert out.stderr.count("would not start") == 8
