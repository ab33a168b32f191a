"""The cluster path against a real Slurm: scripts/slurm_local.sh starts a single-node cluster
(slurmctld, slurmd, slurmdbd for sacct, two fake GPUs) once for the session and stops it after,
by PID. The tasks execute notebooks/selftest.md (seconds, no engine) into a temporary run store.

Skipped where Slurm is not installed, unless CI=true: then the script installs it (apt-get)."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from specbench.cli import main as cli

from specbench.cli import cluster
from specbench.store.runs import open_run

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
LOCAL_PROFILE = ROOT / "cluster" / "profiles.local.toml"
NEEDED = ("slurmctld", "slurmd", "slurmdbd", "sbatch", "sacct", "munged", "mariadbd")
WAIT_S = 300      # bound on every wait: a stuck cluster fails the test, it never hangs it


def _installed(program: str) -> bool:
    return bool(shutil.which(program) or shutil.which(program, path="/usr/sbin:/usr/bin"))


def _alive(pid: int) -> bool:
    """A process that runs (a zombie waiting for its reaper has stopped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A private cluster for this session; every daemon it started is gone afterwards."""
    in_ci = os.environ.get("CI") == "true"
    missing = [p for p in NEEDED if not _installed(p)]
    if missing and not in_ci:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing): "
                    "`scripts/slurm_local.sh start` installs it with apt-get; CI runs these tests")
    if os.geteuid() != 0 and not in_ci:
        pytest.skip("the local Slurm cluster runs its daemons as root")
    state = tmp_path_factory.mktemp("slurm")
    # Own state folder and ports: a cluster someone started by hand keeps running untouched.
    env = {**os.environ, "SPECBENCH_SLURM_DIR": str(state), "SPECBENCH_SLURM_PORT": "26817"}
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "CUDA_VISIBLE_DEVICES")}
    try:
        started = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True,
                                 text=True, timeout=900)
        assert started.returncode == 0, f"slurm_local.sh start failed:\n{started.stderr[-3000:]}"
        os.environ["SLURM_CONF"] = str(state / "slurm.conf")
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)   # Slurm, not the caller, must set it
        yield state
    finally:
        pids = {p.stem: int(p.read_text()) for p in (state / "pids").glob("*.pid")}
        stopped = subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True,
                                 text=True, timeout=120)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert stopped.returncode == 0, stopped.stderr
    assert pids, "the start script recorded no daemon"
    left = {name: pid for name, pid in pids.items() if _alive(pid)}
    assert not left, f"daemons left running: {left}"


def _submit(folder: Path, root: Path, *args: str) -> Path:
    code = cli.main(["cluster", "submit", "selftest", "--profile", str(LOCAL_PROFILE),
                     "--root", str(root), "--folder", str(folder), *args])
    assert code == 0
    return folder


@pytest.fixture(scope="module")
def submitted(slurm, tmp_path_factory):
    """Every submission of this module, made at once so the cluster runs them side by side."""
    base = tmp_path_factory.mktemp("cluster")
    root = base / "runs"
    return root, {
        # 3 steps of 3 s: long enough to requeue it mid-run
        "requeue": _submit(base / "requeue", root, "--partition", "cpu",
                           "-p", "steps", "3", "-p", "step_s", "3"),
        # two values on each partition: two tasks on the fake GPUs, two on the CPU partition
        "happy": _submit(base / "happy", root, "-g", "value", "[1, 2]"),
        "bad": _submit(base / "bad", root, "--partition", "cpu", "-g", "value", "[4, -1]"),
        # a quick task and one that sleeps until cancelled
        "cancel": _submit(base / "cancel", root, "--partition", "cpu",
                          "-g", "step_s", "[0, 600]"),
    }


def _wait_until(what: str, check, limit: float = WAIT_S):
    end = time.monotonic() + limit
    while not (found := check()):
        assert time.monotonic() < end, f"{what}: not after {limit} s"
        time.sleep(0.5)
    return found


def _sacct(job_ids: list[str]) -> dict[str, str]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,State",
                          "-j", ",".join({j.split("_")[0] for j in job_ids})],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("|", 1) for line in out.splitlines())


def test_requeued_task_resumes_its_run(submitted):
    _, folders = submitted
    record = folders["requeue"] / "tasks" / "cpu-000.run"
    first = _wait_until("the task's first step", lambda: record.exists() and (
        Path(record.read_text()) / "parts" / "step-000.json").exists() and record.read_text())
    job_id = cluster.load_submission(folders["requeue"])["tasks"][0]["attempts"][-1]["job_id"]
    subprocess.run(["scontrol", "requeue", job_id], check=True)
    # Slurm holds a requeued job back for a while (reason BeginTime); start it now.
    _wait_until("the requeued job pending", lambda: subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%r"], capture_output=True, text=True
    ).stdout.strip() == "BeginTime", limit=60)
    subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True)
    [status] = cluster.collect(folders["requeue"], timeout_s=WAIT_S, poll_s=1)
    assert status.outcome == "completed" and status.run == first
    run = open_run(first)
    restarts = [run.parts()[f"step-{i:03d}"]["slurm_restart_count"] for i in range(3)]
    # Step 0 from the first attempt, the rest from the requeued one; step 0 was not redone.
    assert restarts[0] in (None, "0") and restarts[1:] == ["1", "1"]
    assert run.complete and len(run.table("selftest.csv")) == 3


def test_job_array_runs_each_task_on_its_own_gpu_into_the_given_store(submitted):
    root, folders = submitted
    found = cluster.collect(folders["happy"], timeout_s=WAIT_S, poll_s=1)
    assert [(s.key, s.outcome) for s in found] == [
        ("gpu-000", "completed"), ("gpu-001", "completed"),
        ("cpu-000", "completed"), ("cpu-001", "completed")]
    # One array per partition, one array task per parameter group.
    arrays = {s.partition: {s.job_id.split("_")[0]} for s in found}
    assert all(len(ids) == 1 for ids in arrays.values()) and arrays["gpu"] != arrays["cpu"]
    # Accounting agrees: every task COMPLETED.
    states = _sacct([s.job_id for s in found])
    assert all(states[s.job_id] == "COMPLETED" for s in found), states
    # Each run is in the temporary store, complete, and says where it ran.
    parts = {}
    for s in found:
        run = open_run(s.run)
        assert run.complete and Path(s.run).parent.parent == root and run.sku == "selftest"
        parts[s.key] = run.parts()["step-000"]
        assert parts[s.key]["slurm_job_partition"] == s.partition
        assert f"{parts[s.key]['slurm_array_job_id']}_{parts[s.key]['slurm_array_task_id']}" \
            == s.job_id
    assert not (ROOT / "runs" / "selftest").exists()
    # GPU tasks: one device each, the one Slurm gave the job; CPU tasks: none.
    gpus = [parts["gpu-000"]["cuda_visible_devices"], parts["gpu-001"]["cuda_visible_devices"]]
    assert all(g in ("0", "1") for g in gpus)
    assert all(parts[k]["cuda_visible_devices"] == parts[k]["slurm_job_gpus"]
               for k in ("gpu-000", "gpu-001"))
    assert parts["cpu-000"]["cuda_visible_devices"] is None
    assert parts["cpu-001"]["cuda_visible_devices"] is None
    # Two GPU tasks that ran at the same time had different devices.
    spans = {s.key: _span(s.job_id) for s in found}
    (a0, a1), (b0, b1) = spans["gpu-000"], spans["gpu-001"]
    if a0 < b1 and b0 < a1:
        assert gpus[0] != gpus[1]
    # From a later shell: the command line reads the same record and exits 0.
    assert cli.main(["cluster", "status", str(folders["happy"])]) == 0


def _span(job_id: str) -> tuple[str, str]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "Start,End", "-j", job_id],
                         capture_output=True, text=True, check=True).stdout
    start, end = out.splitlines()[-1].split("|")
    return start, end


def test_bad_parameter_fails_with_its_log_tail_and_the_others_complete(submitted, capsys):
    _, folders = submitted
    found = {s.key: s for s in cluster.collect(folders["bad"], timeout_s=WAIT_S, poll_s=1)}
    assert found["cpu-000"].outcome == "completed"
    assert found["cpu-001"].outcome == "failed" and found["cpu-001"].state == "FAILED"
    assert "ValueError: selftest: parameter value must be a number >= 0, got -1" \
        in found["cpu-001"].log_tail
    assert cli.main(["cluster", "collect", str(folders["bad"]), "--timeout", "0"]) == 1
    out = capsys.readouterr().out
    assert "| ValueError: selftest: parameter value must be a number >= 0" in out
    assert "2 tasks: 1 completed, 1 failed" in out


def test_cancelled_task_is_reported_at_once_and_only_it_is_resubmitted(submitted):
    _, folders = submitted
    folder = folders["cancel"]

    def running():
        return {s.key: s for s in cluster.statuses(folder)
                if (s.key == "cpu-000" and s.final)
                or (s.key == "cpu-001" and s.state == "RUNNING")}
    _wait_until("one task done, the other running", lambda: len(running()) == 2)
    sleeper = running()["cpu-001"].job_id
    subprocess.run(["scancel", sleeper], check=True)
    started = time.monotonic()
    found = {s.key: s for s in cluster.collect(folder, timeout_s=WAIT_S, poll_s=1)}
    assert time.monotonic() - started < 60
    assert found["cpu-000"].outcome == "completed"
    assert found["cpu-001"].outcome == "cancelled" and found["cpu-001"].state == "CANCELLED"

    assert cluster.resubmit(folder) == ["cpu-001"]
    tasks = {t["key"]: t for t in cluster.load_submission(folder)["tasks"]}
    assert len(tasks["cpu-000"]["attempts"]) == 1 and len(tasks["cpu-001"]["attempts"]) == 2
    again = tasks["cpu-001"]["attempts"][-1]["job_id"]
    assert again != sleeper
    subprocess.run(["scancel", again], check=True)
    found = {s.key: s for s in cluster.collect(folder, timeout_s=60, poll_s=1)}
    assert found["cpu-001"].job_id == again and found["cpu-001"].outcome == "cancelled"
