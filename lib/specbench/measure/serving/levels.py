"""The unit of a serving run — one load level of one arm — and the part it is written as.

A level is (arm, workload, mode, level). The moment it is measured it is written as one part of
the run (``parts/<key>.json``, through :meth:`~specbench.store.runs.Run.write_part`: a temporary
file renamed into place, so a kill leaves the whole file or none), holding its row of
``levels.csv``, its rows of ``requests.csv`` and the server that measured it. A killed run keeps
every level it finished, and a resumed one measures only the levels without a part.

The run's tables are built from the parts once every level is done, in the grid's order whatever
order the sessions finished them in. JSON carries each value unchanged (floats by their shortest
repr, NaN included; numpy scalars become the Python numbers they equal), so the tables are the
ones a run written only at its end would have written.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbench.measure.serving.config import Arm, ServingConfig, workload_file
from specbench.measure.workloads import builtin as workloads
from specbench.store.runs import Run

__all__ = ["Level", "level_key", "measuring_arms", "measured_levels", "level_record",
           "keep_level", "level_tables", "workload_source"]


@dataclass(frozen=True)
class Level:
    """One load level of one arm: a unit of work, stored as the part named :attr:`key`."""
    arm: Arm
    workload: str
    mode: str          # "concurrency" (closed loop) or "rate" (open loop)
    level: float       # requests in flight, or requests per second

    @property
    def key(self) -> str:
        return level_key(self.arm.name, self.workload, self.mode, self.level)


def level_key(arm: str, workload: str, mode: str, level: float) -> str:
    """A part's file name: readable (``level-g2-repeat-concurrency-4-…``) and, through a short
    hash of the exact identity, distinct for two prompt files of one name in two folders."""
    path = workload_file(workload)
    readable = f"{arm.replace('γ=', 'g')}-{path.stem if path else workload}-{mode}-{level:g}"
    identity = json.dumps([arm, workload, mode, level]).encode()
    return (f"level-{re.sub(r'[^A-Za-z0-9.+_-]+', '_', readable)}-"
            f"{hashlib.sha256(identity).hexdigest()[:8]}")


def measuring_arms(cfg: ServingConfig) -> dict[str, Arm]:
    """Each arm's name -> the arm whose server measures its configuration: itself, or the
    first arm of the same (γ, schedule, draft) — a plan that chose a fixed γ's configuration is read
    from that γ's levels, not measured twice."""
    first: dict[tuple, Arm] = {}
    return {arm.name: first.setdefault(arm.configuration, arm) for arm in cfg.arms()}


def measured_levels(cfg: ServingConfig) -> list[Level]:
    """Every level a server measures, in the order measured: arm, workload, then level."""
    measuring = measuring_arms(cfg)
    return [Level(arm, workload, mode, level) for arm in cfg.arms()
            if measuring[arm.name].name == arm.name
            for workload in cfg.load.workloads for mode, level in cfg.load.levels()]


def workload_source(workload: str) -> str:
    """Where a workload's prompts come from: an operator's file, the project, Spec-Bench."""
    if workload_file(workload) is not None:
        return "file"
    return "project" if workload in workloads.WORKLOADS else "spec_bench"


def _plain(value):
    """A JSON value: numpy scalars as the Python numbers they equal (np.int64 is not JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def level_record(level: Level, row: dict, requests: pd.DataFrame, server: dict) -> dict:
    """The part of a finished level: its identity, the server that measured it, its row of
    levels.csv and its rows of requests.csv (by column), each with the run's key columns."""
    key = {"arm": level.arm.name, "workload": level.workload, "gamma": level.arm.gamma,
           "source": workload_source(level.workload), "measured_as": level.arm.name}
    if level.arm.draft_depth is not None:    # n-gram runs keep the columns they always had
        key["draft_depth"] = level.arm.draft_depth
    frame = requests.assign(**key, mode=level.mode, level=level.level,
                            request=range(len(requests)))
    return {"arm": level.arm.name, "workload": level.workload, "mode": level.mode,
            "level": level.level, "server": server,
            "row": {name: _plain(value) for name, value in {**key, **row}.items()},
            "requests": {name: [_plain(v) for v in frame[name].tolist()]
                         for name in frame.columns}}


def keep_level(run: Run, level: Level, record: dict) -> None:
    """Write a finished level into the run. A level the run holds already is never written
    again: measured data is not overwritten, whatever a caller asks."""
    if (run.path / "parts" / f"{level.key}.json").exists():
        raise FileExistsError(f"{run.path}: level {level.key} is measured already; "
                              "a measured level is never overwritten")
    run.write_part(level.key, record)


def level_tables(cfg: ServingConfig, parts: dict[str, dict]
                 ) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
    """levels.csv, requests.csv and the servers that measured them, built from the parts in
    the grid's order. An arm measured by an earlier arm's server takes that arm's rows under
    its own name, ``measured_as`` naming the arm measured."""
    measuring = measuring_arms(cfg)
    missing = [lv.key for lv in measured_levels(cfg) if lv.key not in parts]
    if missing:
        raise ValueError(f"{len(missing)} levels not measured yet ({', '.join(missing[:3])}"
                         f"{', …' if len(missing) > 3 else ''})")
    rows, frames, servers = [], [], []
    for arm in cfg.arms():
        names = {"arm": arm.name, "measured_as": measuring[arm.name].name}
        for workload in cfg.load.workloads:
            for mode, level in cfg.load.levels():
                part = parts[level_key(names["measured_as"], workload, mode, level)]
                rows.append({**part["row"], **names})
                frames.append(pd.DataFrame(part["requests"]).assign(**names))
                if part["server"] not in servers:
                    servers.append(part["server"])
    return pd.DataFrame(rows), pd.concat(frames, ignore_index=True), servers
