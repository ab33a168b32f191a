"""Submission of notebook grids as Slurm job arrays, their status, collection and resubmission."""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

try:
    import submitit
    _Checkpointable = submitit.helpers.Checkpointable
except ImportError:  # the `cluster` extra is not installed: submit() says so
    submitit = None
    _Checkpointable = object

from specbench.cli.cluster.profiles import (
    LOG_TAIL_LINES,
    OUTCOMES,
    SUBMISSION_FILE,
    ClusterError,
    Partition,
    notebook_parameters,
    plan_tasks,
)
from specbench.store.runs import (
    DEFAULT_ROOT,
    RUN_RECORD_ENV,
    atomic_write,
    now_iso,
    open_run,
)

__all__ = ["NotebookTask", "load_submission", "submit", "TaskStatus", "slurm_states", "statuses",
           "collect", "resubmit"]



# -- what runs on the node -------------------------------------------------------------------

class NotebookTask(_Checkpointable):
    """One array task: execute the notebook, resuming the run it started before a requeue.

    Checkpointable: on a time-out or preemption signal submitit requeues the task with the same
    arguments, and the run record below makes the second attempt continue the first's run."""

    def __call__(self, notebook: str, parameters: dict, record: str) -> str:
        from specbench.cli.notebooks import execute

        parameters = dict(parameters)
        previous = Path(record).read_text().strip() if Path(record).exists() else ""
        if previous and (Path(previous) / "manifest.json").exists():
            run = open_run(previous)
            if run.complete:
                return str(run.path)
            if "resume" in notebook_parameters(notebook):
                parameters["resume"] = str(run.path)
        os.environ[RUN_RECORD_ENV] = record
        return str(execute(notebook, parameters))


# -- submission ------------------------------------------------------------------------------

def _record_path(folder: Path) -> Path:
    return Path(folder) / SUBMISSION_FILE


def load_submission(folder: str | Path) -> dict:
    path = _record_path(Path(folder))
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"{path}: no submission here "
                           "(the folder `cluster submit` printed)") from None
    except json.JSONDecodeError as exc:
        raise ClusterError(f"{path}: not valid JSON ({exc})") from None


def _save(folder: Path, submission: dict) -> None:
    atomic_write(_record_path(folder), json.dumps(submission, indent=1))


def _submit_arrays(folder: Path, submission: dict, tasks: list[dict]) -> None:
    """Submit ``tasks`` as one job array per partition and record each task's job id."""
    if submitit is None:
        raise ClusterError("submitit is not installed: pip install -e '.[cluster]'")
    by_partition: dict[str, list[dict]] = {}
    for task in tasks:
        by_partition.setdefault(task["partition"], []).append(task)
    for name, group in by_partition.items():
        partition = Partition(**{**submission["partitions"][name],
                                 "setup": tuple(submission["partitions"][name]["setup"])})
        executor = submitit.AutoExecutor(folder=folder / "logs", cluster="slurm")
        executor.update_parameters(name=f"specbench-{submission['notebook']}",
                                   slurm_array_parallelism=len(group),
                                   **partition.executor_parameters())
        jobs = executor.map_array(NotebookTask(), [submission["notebook"]] * len(group),
                                  [t["parameters"] for t in group],
                                  [str(folder / "tasks" / f"{t['key']}.run") for t in group])
        for task, job in zip(group, jobs, strict=True):
            task["attempts"].append({"job_id": job.job_id, "submitted_at": now_iso()})
        _save(folder, submission)


def submit(notebook: str, profile: dict[str, Partition], partitions: list[str] | None = None,
           fixed: dict | None = None, grid: dict[str, list] | None = None,
           root: str | Path = DEFAULT_ROOT, folder: str | Path | None = None,
           split_gamma: bool = False, dry_run: bool = False) -> tuple[Path, dict]:
    """Plan the tasks, submit them (one array per partition) and record the submission."""
    partitions = list(partitions or profile)
    unknown = [p for p in partitions if p not in profile]
    if unknown:
        raise ClusterError(f"partition {unknown[0]!r} is not in the profile (it has: "
                           f"{', '.join(profile)})")
    fixed = dict(fixed or {})
    if "root" in notebook_parameters(notebook):
        # Absolute: the task runs from another working directory, maybe on another node.
        fixed["root"] = str(Path(root).resolve())
    tasks = plan_tasks(notebook, fixed, grid or {}, partitions, split_gamma)
    stamp = now_iso().replace(":", "").replace("-", "").replace("+0000", "Z")[:15]
    folder = Path(folder or Path("cluster-jobs") / f"{notebook}-{stamp}").resolve()
    submission = {"version": 1, "notebook": notebook, "created_at": now_iso(),
                  "root": fixed.get("root"),
                  "partitions": {p: asdict(profile[p]) for p in partitions},
                  "tasks": [{**asdict(t), "attempts": []} for t in tasks]}
    if dry_run:
        return folder, submission
    if _record_path(folder).exists():
        raise ClusterError(f"{folder}: already holds a submission "
                           "(use resubmit, or another --folder)")
    (folder / "tasks").mkdir(parents=True, exist_ok=True)
    _save(folder, submission)
    _submit_arrays(folder, submission, submission["tasks"])
    return folder, submission


# -- status, collection, resubmission --------------------------------------------------------

@dataclass
class TaskStatus:
    key: str
    partition: str
    job_id: str | None
    state: str                # Slurm's word (sacct), or PENDING before accounting sees the job
    outcome: str              # completed / failed / timed out / cancelled / pending / running
    run: str | None = None    # the run folder the task wrote (from its run record)
    log: str | None = None    # its log file
    log_tail: str = ""        # the last lines of that log, for a task that did not complete

    @property
    def final(self) -> bool:
        return self.outcome in ("completed", "failed", "timed out", "cancelled")


def _expand(job_id: str) -> list[str]:
    """sacct folds pending array tasks into one line, e.g. 12_[3-5%2]: one id per task."""
    if "_[" not in job_id:
        return [job_id]
    main, ranges = job_id.split("_[", 1)
    ids = []
    for part in ranges.rstrip("]").split("%")[0].split(","):
        low, _, high = part.partition("-")
        ids += [f"{main}_{i}" for i in range(int(low), int(high or low) + 1)]
    return ids


def slurm_states(job_ids: list[str]) -> dict[str, str]:
    """The state of each job or array task, from ``sacct`` (one call for all of them)."""
    arrays = sorted({j.split("_")[0] for j in job_ids})
    if not arrays:
        return {}
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(arrays)],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ClusterError(f"sacct failed ({out.stderr.strip()}): the cluster needs accounting "
                           "(slurmdbd) for status and collect")
    states = {}
    for line in out.stdout.splitlines():
        job, _, state = line.partition("|")
        for one in _expand(job.strip()):
            # "CANCELLED by 0" -> CANCELLED
            states[one] = state.split()[0] if state.strip() else "UNKNOWN"
    return states


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def statuses(folder: str | Path) -> list[TaskStatus]:
    """One look at every task's latest attempt."""
    folder = Path(folder)
    submission = load_submission(folder)
    latest = {t["key"]: t["attempts"][-1]["job_id"] if t["attempts"] else None
              for t in submission["tasks"]}
    states = slurm_states([j for j in latest.values() if j])
    result = []
    for task in submission["tasks"]:
        job_id = latest[task["key"]]
        state = states.get(job_id, "PENDING") if job_id else "NOT SUBMITTED"
        outcome = OUTCOMES.get(state, "running" if state == "RUNNING" else "pending")
        record = folder / "tasks" / f"{task['key']}.run"
        status = TaskStatus(task["key"], task["partition"], job_id, state, outcome,
                            run=record.read_text().strip() if record.exists() else None)
        if job_id:
            # submitit's log names: <job>_<array task>_<step task>_log.err
            stderr = folder / "logs" / f"{job_id}_0_log.err"
            status.log = str(stderr)
            if outcome not in ("completed", "pending"):
                status.log_tail = _tail(stderr) or _tail(stderr.with_suffix(".out"))
        result.append(status)
    return result


def collect(folder: str | Path, timeout_s: float = 0, poll_s: float = 5) -> list[TaskStatus]:
    """Wait until every task is final or ``timeout_s`` has passed, then report each task."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = statuses(folder)
        if all(s.final for s in current) or time.monotonic() >= deadline:
            return current
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def resubmit(folder: str | Path) -> list[str]:
    """Submit again every task whose latest attempt ended without completing; a task still
    pending or running is left alone. Returns the keys resubmitted."""
    folder = Path(folder).resolve()
    submission = load_submission(folder)
    again = {s.key for s in statuses(folder)
             if (s.final and s.outcome != "completed") or s.state == "NOT SUBMITTED"}
    tasks = [t for t in submission["tasks"] if t["key"] in again]
    if tasks:
        _submit_arrays(folder, submission, tasks)
    return [t["key"] for t in tasks]


