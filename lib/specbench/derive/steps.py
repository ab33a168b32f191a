"""A sweep's engine steps as one tidy table: each recorded step with the call that held it.

The engines of a sweep write their step records into the run (``step_records/``, one file per
engine process, :mod:`specbench.engine.step_records`); each timed or warmup call records its
window on the same monotonic clock (``monotonic_ns`` in the cell's part). A step belongs to the
call whose window contains it, on the engine of the call's γ (the base engine for ``base``
calls). Steps outside every call (start-up, the engine's own dummy runs) keep no call.
Runs measured before step records have none: :func:`step_table` returns an empty frame, and
whoever needs steps says that such a run needs a new ``make book``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specbench.store.step_records import read_step_records

__all__ = ["STEP_RECORDS", "call_windows", "probe_windows", "step_table", "has_step_records"]

STEP_RECORDS = "step_records"
CALL_COLUMNS = ["workload", "gamma", "batch", "arm", "rep", "call", "timed"]


def has_step_records(run_path: Path) -> bool:
    return any((Path(run_path) / STEP_RECORDS).glob("*.jsonl"))


def call_windows(parts: dict[str, dict]) -> pd.DataFrame:
    """One row per call that recorded its monotonic window: the cell, the arm, the engine γ
    (0 for base calls), and the window in ns."""
    rows = []
    for record in parts.values():
        for call in record.get("calls", []):
            if "monotonic_ns" not in call:
                continue
            start, end = call["monotonic_ns"]
            # A shared-base unit (one γ=0 arm round-robin with several γ) names each call's γ.
            gamma = call.get("gamma", record.get("gamma"))
            engine_gamma = 0 if call["arm"] == "base" else gamma
            rows.append({"workload": record["workload"], "gamma": engine_gamma,
                         "batch": record["batch"], "arm": call["arm"], "rep": call["rep"],
                         "call": call["call"], "timed": True, "engine_gamma": engine_gamma,
                         "start_ns": start, "end_ns": end})
    return pd.DataFrame(rows)


def probe_windows(probes: list[dict] | None) -> pd.DataFrame:
    """The mixed step probe's windows (the manifest's ``step_probe``) as call windows of arm
    'probe', workload 'probe' and batch = the probe's decoding rows."""
    rows = [{"workload": "probe", "gamma": probe["gamma"], "batch": window["rows"],
             "arm": "probe", "rep": 0, "call": i, "timed": False,
             "engine_gamma": probe["gamma"], "start_ns": window["monotonic_ns"][0],
             "end_ns": window["monotonic_ns"][1]}
            for probe in probes or [] for i, window in enumerate(probe["windows"])]
    return pd.DataFrame(rows)


def _engine_steps(run_path: Path) -> pd.DataFrame:
    frames = []
    for path in sorted((Path(run_path) / STEP_RECORDS).glob("*.jsonl")):
        frame = read_step_records(path)
        frames.append(frame.assign(engine_gamma=int(frame.attrs["gamma"]), file=path.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _assign(steps: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Each step's call: the window on its engine that contains the step's start."""
    out = steps.assign(**{c: pd.NA for c in CALL_COLUMNS}, window=np.nan)
    for gamma, group in windows.groupby("engine_gamma"):
        on_engine = out.index[out["engine_gamma"] == gamma]
        starts = out.loc[on_engine, "t_start_ns"].to_numpy()
        w = group.sort_values("start_ns")
        slot = np.searchsorted(w["start_ns"].to_numpy(), starts, side="right") - 1
        inside = (slot >= 0) & (starts <= w["end_ns"].to_numpy()[np.maximum(slot, 0)])
        hit = on_engine[inside]
        for column in CALL_COLUMNS:
            out.loc[hit, column] = w[column].to_numpy()[slot[inside]]
        out.loc[hit, "window"] = w["start_ns"].to_numpy()[slot[inside]]
    return out


def step_table(run_path: Path, parts: dict[str, dict],
               probes: list[dict] | None = None) -> pd.DataFrame:
    """Every recorded step of the run with ``duration_s`` and its call (NA outside calls and
    probe windows; ``probes``: the manifest's ``step_probe``)."""
    steps = _engine_steps(run_path)
    if steps.empty:
        return steps
    steps["duration_s"] = steps["duration_ns"] / 1e9
    windows = pd.concat([call_windows(parts), probe_windows(probes)], ignore_index=True)
    return _assign(steps, windows) if not windows.empty else steps
