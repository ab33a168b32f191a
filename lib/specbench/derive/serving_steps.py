"""A serving run's engine steps by arm and load level: what a step under load held.

Each arm's server records its steps into the run (``step_records/arm-<γ>[-plan]-<pid>.jsonl``,
:mod:`specbench.engine.step_records`), and each finished level records its window on the same
monotonic clock (the part's ``monotonic_ns``). A step belongs to the level whose window
holds its start, on its arm's file; the warmup and the gaps between levels belong to none.
Serving runs measured before step records have none: :func:`level_compositions` is empty.

:func:`fit_server` fits the step-time model (:mod:`specbench.theory.step_time`) to those steps:
what a step costs on the server itself, where the API server, the benchmark client and the
engine share the host's cores. `make plan-under-load` prices its load prediction so, from a
short serving probe on other prompts before the sealed plan (the sweep's offline steps grew
2.6 ms per row where the servers' grew 0.4, and sat 10–20 % above them).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.steps import STEP_RECORDS
from specbench.store.runs import Run
from specbench.store.step_records import read_step_records
from specbench.theory.step_time import StepTimeModel, admit_terms, fit_step_time

__all__ = ["arm_file_prefix", "level_steps", "level_compositions", "fit_server"]


def arm_file_prefix(gamma: int, planned: bool, draft_depth: int | None = None) -> str:
    """The step-record file name an arm's server writes (before ``-<pid>.jsonl``); a draft
    model's arm names its depth (``arm-draft-k4-2``), apart from n-gram's arm of that γ."""
    if draft_depth is not None and draft_depth == draft_depth:   # NaN: an n-gram row
        return f"arm-draft-k{int(draft_depth)}-{int(gamma)}"
    return f"arm-{int(gamma)}{'-plan' if planned else ''}"


def _windows(run: Run) -> pd.DataFrame:
    rows = []
    for part in run.parts().values():
        window = part.get("monotonic_ns")
        if window and part.get("mode") == "concurrency":
            rows.append({"arm": part["arm"], "concurrency": int(part["level"]),
                         "prefix": arm_file_prefix(part["row"]["gamma"], part["arm"] == "plan",
                                                   part["row"].get("draft_depth")),
                         "start_ns": window[0], "end_ns": window[1]})
    return pd.DataFrame(rows, columns=["arm", "concurrency", "prefix", "start_ns", "end_ns"])


def level_steps(run: Run) -> pd.DataFrame:
    """Every step recorded inside a closed-loop level, with its arm and concurrency."""
    windows = _windows(run)
    frames = []
    for path in sorted((run.path / STEP_RECORDS).glob("arm-*.jsonl")):
        steps = read_step_records(path)
        for w in windows[windows["prefix"] == path.stem.rsplit("-", 1)[0]].itertuples():
            inside = steps[(steps["t_start_ns"] >= w.start_ns)
                           & (steps["t_start_ns"] <= w.end_ns)]
            frames.append(inside.assign(arm=w.arm, concurrency=w.concurrency))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _level_gaps_ns(steps: pd.DataFrame) -> np.ndarray:
    """Every gap between two consecutive steps of one server at one level."""
    gaps = []
    for _, group in steps.groupby(["arm", "concurrency"]):
        group = group.sort_values("t_start_ns")
        gaps.append(group["t_start_ns"].to_numpy()[1:] - group["t_end_ns"].to_numpy()[:-1])
    return np.concatenate(gaps) if gaps else np.zeros(0)


def _median_gap_s(steps: pd.DataFrame) -> float:
    gaps = _level_gaps_ns(steps)
    gaps = gaps[gaps >= 0]
    return float(np.median(gaps)) / 1e9 if len(gaps) else 0.0


def fit_server(run: Run) -> tuple[StepTimeModel, float, float] | None:
    """The step-time model of every step inside the run's levels (every server; its terms
    admitted as for a sweep's calibration) and the median gap between two steps of one level in
    seconds, of the servers that speculate and of those that do not (the same where the run
    served only one kind); None for a run without step records inside its levels.

    The gap is taken per kind of server because it differs by one: a server started without a
    speculative config left 1.2–1.9 ms between two steps, one with it (a γ of 0 scheduled
    included) 0.1–0.2 ms (the Zen 5 serving runs of 2026-12-08) — a whole-step bias of 4–5 %
    on speculation off that one pooled median hid."""
    steps = level_steps(run)
    if steps.empty:
        return None
    steps = steps.assign(duration_s=steps["duration_ns"] / 1e9)
    model = fit_step_time(steps, admit_terms(steps)[0])
    plain = steps["arm"] == "off"

    def gap(kind: pd.Series) -> float:
        return _median_gap_s(steps[kind] if kind.any() else steps)
    return model, gap(~plain), gap(plain)


def level_compositions(run: Run) -> pd.DataFrame:
    """Per arm and level: steps, the time-weighted running batch, the mean tokens per step of
    each class, the median step and the median gap between steps (ms)."""
    steps = level_steps(run)
    if steps.empty:
        return pd.DataFrame()
    rows = []
    for (arm, level), group in steps.groupby(["arm", "concurrency"]):
        group = group.sort_values("t_start_ns")
        duration = group["duration_ns"].to_numpy(float)
        gaps = group["t_start_ns"].to_numpy()[1:] - group["t_end_ns"].to_numpy()[:-1]
        rows.append({"arm": arm, "concurrency": int(level), "steps": len(group),
                     "running": float((group["rows"] * duration).sum() / duration.sum()),
                     **{f"{c}_per_step": float(group[c].mean()) for c in
                        ("decode_tokens", "draft_tokens", "draft_padded", "prefill_tokens")},
                     "step_ms": float(np.median(duration)) / 1e6,
                     "gap_ms": float(np.median(gaps)) / 1e6 if len(gaps) else np.nan})
    return pd.DataFrame(rows)
