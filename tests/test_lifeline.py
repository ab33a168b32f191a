"""The lifeline plugin (``specbench.engine.lifeline``): a process started under an armed harness
dies when its parent dies, the harness itself never gets the signal, and a child whose parent
died before the ``prctl`` kills itself.

The unit tests build the chain harness → child → grandchild from plain Python processes (no
engine, a second each); the last test SIGKILLs a real ``specbench sweep`` once its engine core
and worker are up and is marked ``engine``."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specbench.engine import lifeline

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux only")

# A process that registers the lifeline (after waiting for a go file, if named), reports its
# parent-death signal in a file, optionally starts one more such process, then sleeps.
CHILD = r"""
import os, subprocess, sys, time
from pathlib import Path
report, go, grandchild = sys.argv[1], sys.argv[2], sys.argv[3]
while go != "-" and not Path(go).exists():
    time.sleep(0.05)
from specbench.engine import lifeline
lifeline.register()
if grandchild != "-":
    subprocess.Popen([sys.executable, "-c", sys.argv[4], grandchild, "-", "-", sys.argv[4]])
Path(report + ".tmp").write_text(str(lifeline.parent_death_signal()))
os.replace(report + ".tmp", report)
time.sleep(120)
"""

# The harness: names itself in the environment (as the engine adapter does), starts CHILD with
# the given arguments, prints its pid, sleeps until killed.
HARNESS = r"""
import os, subprocess, sys, time
from specbench.engine import lifeline
lifeline.arm()
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]],
                         stderr=open(sys.argv[2] + ".err", "w"))
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for a reaper counts) within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def _wait_for(path: Path, within: float = 60.0) -> str:
    deadline = time.monotonic() + within
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return path.read_text()


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != lifeline.ENV}


@pytest.fixture
def harness(tmp_path):
    """Start HARNESS with CHILD's arguments; yield (harness process, child pid); reap all."""
    started, pids = [], []

    def start(*child_args):
        proc = subprocess.Popen([sys.executable, "-c", HARNESS, CHILD, *child_args],
                                stdout=subprocess.PIPE, text=True, env=_env())
        started.append(proc)
        pids.append(int(proc.stdout.readline()))
        return proc, pids[-1]

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
    for pid in pids:
        try:
            for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
                p.kill()
        except psutil.NoSuchProcess:
            pass


def test_child_dies_when_its_harness_is_sigkilled(harness, tmp_path):
    report = tmp_path / "child"
    proc, child = harness(str(report), "-", "-", "-")
    assert _wait_for(report) == str(int(lifeline.SIGNAL))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _gone(child, within=5.0), "the child outlived its SIGKILLed harness"


def test_the_chain_unwinds_link_by_link(harness, tmp_path):
    """harness → child → grandchild (the shape harness → EngineCore → Worker): killing the
    harness kills the child, whose death kills the grandchild."""
    report, grand = tmp_path / "child", tmp_path / "grandchild"
    proc, child = harness(str(report), "-", str(grand), CHILD)
    _wait_for(report)
    assert _wait_for(grand) == str(int(lifeline.SIGNAL))
    (grandchild,) = psutil.Process(child).children()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _gone(child, within=5.0) and _gone(grandchild.pid, within=5.0)


def test_a_child_whose_harness_died_before_the_prctl_kills_itself(harness, tmp_path):
    """The harness dies while the child is still starting (it waits for a go file): the
    kernel has nobody to signal it for, so the child's own check must end it."""
    report, go = tmp_path / "child", tmp_path / "go"
    proc, child = harness(str(report), str(go), "-", "-")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert psutil.Process(child).is_running()       # orphaned, not signalled
    go.touch()
    assert _gone(child, within=10.0), "an orphan armed too late lived on"
    assert not report.exists()
    assert "no longer among its ancestors" in _wait_for(Path(f"{report}.err"), within=5.0)


def _run(code: str, env: dict) -> str:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True, timeout=60).stdout.strip()


def test_the_harness_and_an_unarmed_process_get_no_signal():
    prefix = "from specbench.engine import lifeline\n"
    harness_itself = prefix + "lifeline.arm(); lifeline.register(); lifeline.register()\n" \
        "print(lifeline.parent_death_signal())"
    assert _run(harness_itself, _env()) == "0"
    off = prefix + "lifeline.register(); print(lifeline.parent_death_signal())"
    assert _run(off, _env()) == "0"
    assert _run(off, {**_env(), lifeline.ENV: "off"}) == "0"


def test_an_existing_parent_death_signal_is_kept(tmp_path):
    """The server adapter starts ``vllm serve`` with SIGTERM; the plugin keeps that choice."""
    code = ("import ctypes, signal\nfrom specbench.engine import lifeline\n"
            "ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"
            "lifeline.register(); print(lifeline.parent_death_signal())")
    assert _run(code, {**_env(), lifeline.ENV: str(os.getpid())}) == str(int(signal.SIGTERM))


def test_forked_children_of_the_main_thread_are_armed_others_not():
    """A fork without exec never calls the plugin (vLLM's plugins-loaded flag is inherited) and
    Linux clears the signal across fork: the at-fork hook sets it — for forks made by the main
    thread only (the signal follows the parent *thread*)."""
    code = r"""
import os, threading
from specbench.engine import lifeline
lifeline.arm(); lifeline.register()
def fork_and_report():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, str(lifeline.parent_death_signal()).encode()); os._exit(0)
    os.waitpid(pid, 0); os.close(w)
    return os.read(r, 8).decode()
seen = [fork_and_report()]
t = threading.Thread(target=lambda: seen.append(fork_and_report())); t.start(); t.join()
print(",".join(seen))
"""
    assert _run(code, _env()) == f"{int(lifeline.SIGNAL)},0"


def test_a_garbled_environment_is_one_line():
    with pytest.raises(lifeline.LifelineError, match="SPECBENCH_LIFELINE='x'") as caught:
        lifeline.harness_pid({lifeline.ENV: "x"})
    assert "\n" not in str(caught.value)
    assert lifeline.harness_pid({}) is None and lifeline.harness_pid({lifeline.ENV: "42"}) == 42


def test_the_adapters_arm_the_lifeline(tmp_path, monkeypatch):
    """The engine adapter names its own process before vllm.LLM starts; the server adapter puts
    its own pid in the environment of ``vllm serve``."""
    import types

    from specbench.engine import vllm_engine as engine
    from specbench.measure.serving.server import Server
    seen = []

    class StandInLLM:
        def __init__(self, **kwargs):
            seen.append(os.environ.get(lifeline.ENV))

        def get_tokenizer(self):
            return None

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=StandInLLM))
    monkeypatch.setattr(engine, "on_gpu", lambda: False)
    monkeypatch.setattr(lifeline, "register", lambda: None)   # no fork hook in pytest itself
    monkeypatch.setenv(lifeline.ENV, "stale")
    engine.Engine(engine.EngineSettings(model=str(tmp_path)))
    assert seen == [str(os.getpid())]
    monkeypatch.setenv(lifeline.ENV, "stale")
    server = Server(engine.EngineSettings(model=str(tmp_path)), port=1)
    assert server.env()[lifeline.ENV] == str(os.getpid())


def test_the_plugin_is_declared_and_installed():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'specbench-lifeline = "{lifeline.ENTRY_POINT}"' in text
    from importlib.metadata import entry_points
    installed = {ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert lifeline.ENTRY_POINT in installed, "reinstall the package: pip install -e ."


# --- the real engine ----------------------------------------------------------------------

def _title(proc: psutil.Process) -> str:
    try:
        return " ".join([proc.name(), *proc.cmdline()[:1]])
    except psutil.Error:
        return ""


def _alive(procs) -> list:
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.engine
def test_sigkilled_sweep_leaves_no_engine_core_or_worker(tmp_path):
    """A real ``specbench sweep`` (γ = 0, one prompt, fp32) is SIGKILLed once its engine is up
    (vLLM has logged the end of the engine core's start-up, so the worker has loaded the
    plugins too); its EngineCore and Worker must be gone within 20 s."""
    grid = ["--gammas", "0", "--batches", "1", "--workloads", "repeat", "--prompts", "1",
            "--reps", "1", "--warmup", "0", "--max-tokens", "8", "--dtype", "float32",
            "--root", str(tmp_path / "runs")]
    log = tmp_path / "sweep.log"
    env = {k: v for k, v in _env().items() if k != "SPECBENCH_FAULT"}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "specbench.cli.main", "sweep", *grid],
                                stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    titles: dict = {}      # every descendant seen, with its latest title (vLLM retitles)
    try:
        deadline, worker_seen = time.monotonic() + 400, None
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                break
            titles.update((p, _title(p) or titles.get(p, "")) for p in children)
            if any("EngineCor" in t for t in titles.values()) and \
                    any("Worker" in t for t in titles.values()):
                worker_seen = worker_seen or time.monotonic()
                # up: vLLM logged it, or (its log elsewhere) the worker has had 60 s
                if "init engine" in log.read_text(errors="replace") or \
                        time.monotonic() - worker_seen > 60:
                    break
            time.sleep(0.2)
        assert proc.poll() is None, f"the sweep ended before its engine was up:\n" \
                                    f"{log.read_text()[-2000:]}"
        engine = [p for p, t in titles.items() if "EngineCor" in t or "Worker" in t]
        assert len(engine) >= 2, list(titles.values())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 20
        while _alive(engine) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [(p.pid, titles[p]) for p in _alive(engine)]
        print("other descendants still alive:", [(p.pid, titles[p]) for p in _alive(titles)])
        assert left == [], f"outlived the SIGKILLed harness: {left}"
    finally:
        proc.kill()
        proc.wait()
        for p in _alive(titles):
            p.kill()
