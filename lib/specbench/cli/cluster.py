"""A chapter's notebook on a Slurm cluster: one job array per partition, through submitit.

    specbench cluster submit sweep --profile cluster/profiles.toml -g workloads '[["repeat"], ["open"]]'
    specbench cluster status  cluster-jobs/sweep-20261130T0500Z     # one look
    specbench cluster collect cluster-jobs/sweep-20261130T0500Z     # wait (bounded), then report
    specbench cluster resubmit cluster-jobs/sweep-20261130T0500Z    # rerun what did not complete

A *profile* (TOML, see ``cluster/profiles.example.toml``) names the partitions and what a task
asks of each: GPUs (and their gres type), CPUs, memory, time, set-up lines. A *task* is one
parameter group on one partition; every task of a partition goes into one job array (Slurm fixes
partition and resources per array, so a submission to two partitions is two arrays). Each task
executes ``notebooks/<name>.md`` with :func:`specbench.cli.notebooks.execute`, writing its run into
the run store ``root`` (a notebook parameter) on the shared filesystem.

Requeue and resubmission resume: the task sets ``SPECBENCH_RUN_RECORD`` so the run store writes
the folder of the run it creates into ``<folder>/tasks/<key>.run``. A requeued (Slurm) or
resubmitted (``resubmit``) task reads that file: a complete run is returned as it is, an
incomplete one is handed to the notebook's ``resume`` parameter (the sweep finishes its
remaining cells). A notebook without ``resume`` starts a new run; the old one stays, incomplete.

The submission — job ids, tasks and their parameters — is recorded in ``<folder>/submission.json``
so status, collect and resubmit work from any later shell. States come from ``sacct`` (the
accounting daemon); every wait is bounded, so a task killed from outside is reported, never
waited on.
"""
from __future__ import annotations

import ast
import itertools
import json
import os
import subprocess
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    import submitit
    _Checkpointable = submitit.helpers.Checkpointable
except ImportError:  # the `cluster` extra is not installed: submit() says so
    submitit = None
    _Checkpointable = object

from specbench.store.runs import RUN_RECORD_ENV, DEFAULT_ROOT, atomic_write, create_run, now_iso, open_run

__all__ = ["Partition", "Task", "TaskStatus", "ClusterError", "load_profile",
           "notebook_parameters", "plan_tasks", "split_gammas", "submit", "statuses", "collect",
           "resubmit", "load_submission", "run_selftest"]

SUBMISSION_FILE = "submission.json"
# Slurm's final job states, by what they mean for the task. Anything else is still on its way
# (PENDING, RUNNING, REQUEUED, COMPLETING, SUSPENDED, ...).
OUTCOMES = {"COMPLETED": "completed", "FAILED": "failed", "OUT_OF_MEMORY": "failed",
            "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "PREEMPTED": "failed",
            "TIMEOUT": "timed out", "DEADLINE": "timed out", "CANCELLED": "cancelled"}
LOG_TAIL_LINES = 15


class ClusterError(ValueError):
    """A bad profile, grid or submission folder; the message names the file or argument."""


# -- profiles --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Partition:
    """What one task asks of a partition."""
    name: str                       # the profile's name for it (also the task keys' prefix)
    slurm_partition: str            # the partition as Slurm knows it
    gpus_per_task: int = 0
    gpu_type: str | None = None     # gres type (gpu:<type>:N); None: any GPU of the partition
    cpus_per_task: int = 1
    mem_gb: float = 4
    time_min: int = 60
    setup: tuple[str, ...] = ()     # shell lines run before the task (module load, activate)
    sbatch: dict = field(default_factory=dict)   # any other sbatch flag: account, qos, constraint

    def executor_parameters(self) -> dict:
        """submitit AutoExecutor parameters for one task of this partition."""
        params = {"slurm_partition": self.slurm_partition, "cpus_per_task": self.cpus_per_task,
                  "mem_gb": self.mem_gb, "timeout_min": self.time_min, "nodes": 1,
                  "tasks_per_node": 1}
        if self.gpus_per_task and self.gpu_type:
            params["slurm_gres"] = f"gpu:{self.gpu_type}:{self.gpus_per_task}"
        elif self.gpus_per_task:
            params["gpus_per_node"] = self.gpus_per_task
        if self.setup:
            params["slurm_setup"] = list(self.setup)
        if self.sbatch:
            params["slurm_additional_parameters"] = dict(self.sbatch)
        return params


_PARTITION_TYPES = {"slurm_partition": str, "gpus_per_task": int, "gpu_type": str,
                    "cpus_per_task": int, "mem_gb": (int, float), "time_min": int,
                    "setup": list, "sbatch": dict}
_MINIMUM = {"gpus_per_task": 0, "cpus_per_task": 1, "time_min": 1}


def load_profile(path: str | Path) -> dict[str, Partition]:
    """The partitions of a profile file; a bad field is named with its file and table."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"{path}: no such profile file (copy cluster/profiles.example.toml "
                           "and edit it)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"{path}: not valid TOML ({exc})") from None
    defaults = data.get("defaults", {})
    tables = data.get("partitions")
    if not isinstance(tables, dict) or not tables:
        raise ClusterError(f"{path}: no [partitions.<name>] table")
    partitions = {}
    for name, table in tables.items():
        fields = {**defaults, **table}
        for key, value in fields.items():
            where = f"{path}: partitions.{name}.{key}"
            if key not in _PARTITION_TYPES:
                raise ClusterError(f"{where}: unknown field (known: {sorted(_PARTITION_TYPES)})")
            if not isinstance(value, _PARTITION_TYPES[key]) or isinstance(value, bool):
                raise ClusterError(f"{where}: expected {_PARTITION_TYPES[key]}, got {value!r}")
            if key in _MINIMUM and not value >= _MINIMUM[key] or key == "mem_gb" and value <= 0:
                raise ClusterError(f"{where}: out of range: {value!r}")
        fields.setdefault("slurm_partition", name)
        fields["setup"] = tuple(fields.get("setup", ()))
        partitions[name] = Partition(name=name, **fields)
    return partitions


# -- notebooks and grids ---------------------------------------------------------------------

def notebook_parameters(name: str) -> dict:
    """The parameters a notebook declares (its cell tagged ``parameters``), with defaults."""
    import jupytext
    from specbench.cli.notebooks import NOTEBOOKS

    source = NOTEBOOKS / f"{name}.md"
    if not source.exists():
        raise ClusterError(f"notebook {name!r}: no {source} (choose from "
                           f"{sorted(p.stem for p in NOTEBOOKS.glob('*.md'))})")
    for cell in jupytext.read(source).cells:
        if "parameters" in cell.metadata.get("tags", []):
            found = {}
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                    try:
                        found[node.targets[0].id] = ast.literal_eval(node.value)
                    except ValueError:
                        found[node.targets[0].id] = None
            return found
    raise ClusterError(f"{source}: no cell tagged 'parameters'")


def split_gammas(gammas) -> list[list[int]]:
    """One γ group per task. vLLM fixes γ per engine, so a sweep restarts its engine for every γ
    anyway; split, each task pays one more engine start and re-measures the γ=0 baseline its
    speedups need (kept in every group). That pays when the whole grid would outlast the
    partition's time limit, or when idle nodes would otherwise wait."""
    others = [g for g in gammas if g != 0]
    if not others:
        return [list(gammas)]
    return [([0] if 0 in gammas else []) + [g] for g in others]


@dataclass
class Task:
    key: str                  # stable across resubmissions: <partition>-<index>
    partition: str
    parameters: dict


def plan_tasks(notebook: str, fixed: dict, grid: dict[str, list], partitions: list[str],
               split_gamma: bool = False) -> list[Task]:
    """One task per parameter group (the product of the grid's axes) per partition."""
    declared = notebook_parameters(notebook)
    for name in [*fixed, *grid]:
        if name not in declared or name == "run_path_file":
            raise ClusterError(f"notebook {notebook!r} has no parameter {name!r} (it has: "
                               f"{', '.join(k for k in declared if k != 'run_path_file')})")
    axes = dict(grid)
    for name, values in axes.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ClusterError(f"grid axis {name!r}: expected a non-empty list, got {values!r}")
    if split_gamma:
        if "gammas" not in declared:
            raise ClusterError(f"--split-gamma: notebook {notebook!r} has no 'gammas' parameter")
        if "gammas" in axes:
            raise ClusterError("--split-gamma and a grid axis 'gammas' both split γ: use one")
        axes["gammas"] = split_gammas(fixed.get("gammas", declared["gammas"]))
    groups = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())] or [{}]
    return [Task(f"{p}-{i:03d}", p, {**fixed, **group})
            for p in partitions for i, group in enumerate(groups)]


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
        raise ClusterError(f"{path}: no submission here (the folder `cluster submit` printed)") from None
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
        for task, job in zip(group, jobs):
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
        raise ClusterError(f"{folder}: already holds a submission (use resubmit, or another --folder)")
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


# -- the self-test notebook's work -----------------------------------------------------------

SELFTEST_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                "SLURM_JOB_PARTITION", "SLURM_RESTART_COUNT", "CUDA_VISIBLE_DEVICES",
                "SLURM_JOB_GPUS")


def run_selftest(value: float, steps: int = 1, step_s: float = 0.0, root: str | Path | None = None,
                 resume: str | Path | None = None):
    """A cheap stand-in for a measurement, to test the cluster path without an engine.

    Writes ``steps`` parts — each records where it ran (the Slurm job and array task, the
    partition, ``CUDA_VISIBLE_DEVICES``) and ``value ** 2`` — then a ``selftest.csv`` table; the
    run is left open for the notebook runner to close. With ``resume`` it continues that run,
    skipping the steps already written, as a requeued sweep skips its finished cells."""
    import pandas as pd

    from specbench.engine.vllm_engine import hardware_info
    from specbench.store.runs import code_revision

    if not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"selftest: parameter value must be a number >= 0, got {value!r}")
    if resume:
        run = open_run(resume)
    else:
        none = "none: the self-test loads no model"
        run = create_run(Path(root or DEFAULT_ROOT), {
            "kind": "selftest", "sku": "selftest", "code": code_revision(),
            "model": {"name": "none", "weights_sha256": none, "tokenizer_sha256": none},
            "engine": {"name": "none", "version": "none", "settings": {}},
            "hardware": hardware_info(),
            "grid": {"value": value, "steps": steps, "step_s": step_s}})
    grid = run.manifest["grid"]
    done = run.parts()
    for step in range(grid["steps"]):
        key = f"step-{step:03d}"
        if key in done:
            continue
        time.sleep(grid["step_s"])
        run.write_part(key, {"step": step, "value": grid["value"],
                             "result": grid["value"] ** 2, "written_at": now_iso(),
                             "pid": os.getpid(), "host": os.uname().nodename,
                             **{k.lower(): os.environ.get(k) for k in SELFTEST_ENV}})
    table = pd.DataFrame(run.parts().values()).sort_values("step")
    run.write_table("selftest.csv", table)
    return run


# -- command line (``specbench cluster ...``) ------------------------------------------------

EXIT_ALL_COMPLETED, EXIT_SOME_FAILED, EXIT_STILL_RUNNING = 0, 1, 3


def add_arguments(parser) -> None:
    """The ``specbench cluster`` subcommands."""
    actions = parser.add_subparsers(dest="action", required=True)
    sub = actions.add_parser(
        "submit", help="submit a notebook's grid: one job array per partition",
        description="Submit notebooks/<NOTEBOOK>.md as one task per parameter group per "
                    "partition of the profile. Prints the submission folder that status, "
                    "collect and resubmit take.")
    sub.add_argument("notebook", help="sweep, host_floor, selftest, ... (notebooks/<name>.md)")
    sub.add_argument("--profile", default="cluster/profiles.toml",
                     help="cluster profile, TOML (default cluster/profiles.toml; see "
                          "cluster/profiles.example.toml)")
    sub.add_argument("--partition", action="append", metavar="NAME",
                     help="a partition of the profile; repeat for several (default: all)")
    sub.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUE"), help="a notebook parameter for every task "
                     "(Python literal)")
    sub.add_argument("-g", "--grid", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUES"), help="a grid axis: a Python list, one task per "
                     "element; several axes multiply")
    sub.add_argument("--split-gamma", action="store_true",
                     help="one task per γ (each keeps the γ=0 baseline): more engine starts, "
                          "shorter tasks")
    sub.add_argument("--root", default=str(DEFAULT_ROOT),
                     help="run store on the shared filesystem (default: the checkout's runs/)")
    sub.add_argument("--folder", help="submission folder: logs, run records, submission.json "
                                      "(default cluster-jobs/<notebook>-<time>)")
    sub.add_argument("--dry-run", action="store_true", help="print the tasks, submit nothing")
    for name, text in (("status", "one look at every task"),
                       ("collect", "wait until every task ends (bounded), then report")):
        p = actions.add_parser(name, help=text, description=f"{text}. Exit status: 0 every "
                               "task completed, 1 some task failed, timed out or was cancelled, "
                               "3 some task is still pending or running.")
        p.add_argument("folder", help="the folder `cluster submit` printed")
        p.add_argument("--timeout", type=float, default=0 if name == "status" else 3600,
                       help="seconds to wait at most (default %(default)s)")
    again = actions.add_parser("resubmit", help="submit again the tasks that did not complete "
                               "(their runs resume)")
    again.add_argument("folder")


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _report(found: list[TaskStatus]) -> int:
    print(f"{'task':12s} {'partition':10s} {'job':12s} {'state':12s} {'outcome':10s} run")
    for s in found:
        print(f"{s.key:12s} {s.partition:10s} {s.job_id or '-':12s} {s.state:12s} "
              f"{s.outcome:10s} {s.run or '-'}")
        if s.log_tail:
            print(f"  | last lines of {s.log}:")
            print("\n".join(f"  | {line}" for line in s.log_tail.splitlines()))
    counts = {o: sum(s.outcome == o for s in found) for o in dict.fromkeys(s.outcome for s in found)}
    print(f"{len(found)} tasks: " + ", ".join(f"{n} {o}" for o, n in counts.items()))
    if not all(s.final for s in found):
        return EXIT_STILL_RUNNING
    return EXIT_ALL_COMPLETED if all(s.outcome == "completed" for s in found) else EXIT_SOME_FAILED


def main(args, parser) -> int:
    """Run one ``specbench cluster`` action; user errors go through ``parser.error`` (exit 2)."""
    try:
        if args.action == "submit":
            grid = {name: _literal(values) for name, values in args.grid}
            folder, submission = submit(
                args.notebook, load_profile(args.profile), args.partition,
                fixed={k: _literal(v) for k, v in args.parameter}, grid=grid, root=args.root,
                folder=args.folder, split_gamma=args.split_gamma, dry_run=args.dry_run)
            for name, fields in submission["partitions"].items():
                request = Partition(**{**fields, "setup": tuple(fields["setup"])})
                print(f"# {name}: {json.dumps(request.executor_parameters())}")
            for task in submission["tasks"]:
                job = task["attempts"][-1]["job_id"] if task["attempts"] else "dry-run"
                print(f"{task['key']:12s} {job:12s} {json.dumps(task['parameters'])}")
            print(folder)
            return 0
        if args.action in ("status", "collect"):
            return _report(collect(args.folder, timeout_s=args.timeout))
        if args.action == "resubmit":
            keys = resubmit(args.folder)
            print(f"resubmitted {len(keys)} task(s): {' '.join(keys) or '-'}")
            return 0
    except ClusterError as exc:
        parser.error(str(exc))
    raise AssertionError(args.action)
