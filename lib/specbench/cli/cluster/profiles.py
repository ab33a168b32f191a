"""Cluster profiles (partitions and their resources) and the notebook grids split into tasks."""
from __future__ import annotations

import ast
import itertools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SUBMISSION_FILE", "OUTCOMES", "LOG_TAIL_LINES", "ClusterError", "Partition",
           "load_profile", "notebook_parameters", "split_gammas", "Task", "plan_tasks"]

try:
    import submitit
    _Checkpointable = submitit.helpers.Checkpointable
except ImportError:  # the `cluster` extra is not installed: submit() says so
    submitit = None
    _Checkpointable = object




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
    """One γ group per task. Split, a sweep gives up its shared base: each task re-measures
    the γ=0 baseline its speedups need (kept in every group), so the grid costs n−1 more base
    arms and the γ of one workload are judged against different baselines. That pays when the
    whole grid would outlast the partition's time limit, when idle nodes would otherwise wait,
    or when one node cannot hold every γ's engine at once."""
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
    groups = [dict(zip(axes, combo, strict=True))
              for combo in itertools.product(*axes.values())] or [{}]
    return [Task(f"{p}-{i:03d}", p, {**fixed, **group})
            for p in partitions for i, group in enumerate(groups)]


