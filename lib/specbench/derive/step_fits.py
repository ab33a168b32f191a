"""The step-time model per host session, fitted once per store: coefficients, the held-out
error per step class on another run of the same session, and the cells of that run predicted
from their steps.

In each host session whose sweeps kept step records, the calibration is the latest sweep that
ran the mixed step probe (the only one whose steps identify the per-row and prefill terms), and
every other sweep of the session with step records is a check: its steps and its cells are
predicted from the calibration alone (a sweep whose records lack a column the fit uses, older
than the attention pairs, is not). A session with one such sweep has a fit and no check.
A sweep whose engine instances ran the same work at different speeds
(:mod:`specbench.derive.engine_agreement`) is neither: no model of one step cost predicts two
speeds; it is listed in the session's ``disagreeing``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbench.derive.engine_agreement import agreement_row
from specbench.derive.steps import has_step_records, step_table
from specbench.store.cache import memoised
from specbench.store.hosts import host_sessions
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.theory.errors import percent_error
from specbench.theory.step_time import (
    StepTimeModel,
    admit_terms,
    decode_steps,
    design,
    fit_step_time,
    predict_cells,
    step_class,
)

__all__ = ["SessionFit", "session_fits", "fit_run", "fit_table", "check_steps", "check_cells",
           "share_curve", "engine_agreement"]


@dataclass(frozen=True)
class SessionFit:
    session: str
    sku: str
    calibration: str               # run id
    checks: tuple[str, ...]        # run ids
    model: StepTimeModel
    verdicts: dict
    disagreeing: tuple[str, ...] = ()   # run ids whose engines disagreed (agreement_row)


def _steps(run: Run) -> pd.DataFrame:
    table = step_table(run.path, run.parts(), run.manifest.get("step_probe"))
    return table[table["arm"].notna()].reset_index(drop=True)


def _recorded_sweeps(root) -> list[Run]:
    return [r for r in load_runs(root, kind="sweep") if has_step_records(r.path)]


def fit_run(run: Run) -> StepTimeModel | None:
    """The step-time model of one probed sweep with step records (its admitted terms), as
    :func:`session_fits` fits a session's calibration; None for a run without them."""
    if not (has_step_records(run.path) and run.manifest.get("step_probe")):
        return None
    records = _steps(run)
    return fit_step_time(records, admit_terms(records)[0])


@memoised
def session_fits(root=DEFAULT_ROOT) -> list[SessionFit]:
    """One fit per host session that has a probed sweep with step records."""
    runs = _recorded_sweeps(root)
    sessions = host_sessions(runs)
    agree = engine_agreement(root).set_index("run")["engines_agree"]
    fits = []
    for session in sorted(set(sessions.values())):
        members = [r for r in runs if sessions[r.run_id] == session]
        agreeing = [r for r in members if agree[r.run_id]]
        probed = [r for r in agreeing if r.manifest.get("step_probe")]
        if not probed:
            continue
        calibration = probed[-1]
        records = _steps(calibration)
        terms, verdicts = admit_terms(records)
        model = fit_step_time(records, terms)
        fits.append(SessionFit(session, calibration.sku, calibration.run_id,
                               tuple(r.run_id for r in agreeing if r is not calibration
                                     and _predictable(model, r)),
                               model, verdicts,
                               tuple(r.run_id for r in members if not agree[r.run_id])))
    return fits


def _predictable(model: StepTimeModel, run: Run) -> bool:
    """Whether ``run``'s records hold every column ``model`` reads: a run recorded before the
    attention pairs were kept (step records version 1) cannot check a model that uses them."""
    return bool(np.isfinite(design(_steps(run), model.terms)).all())


@memoised
def engine_agreement(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Per sweep with step records: the γ=0 and speculative engines' plain-step medians and
    whether they agree (:mod:`specbench.derive.engine_agreement`)."""
    return pd.DataFrame([agreement_row(r) for r in _recorded_sweeps(root)],
                        columns=["run", "sku", "base_plain_ms", "speculative_plain_ms",
                                 "base_slower_pct", "engines_agree"])


def _run(root, run_id: str) -> Run:
    return next(r for r in _recorded_sweeps(root) if r.run_id == run_id)


def fit_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    """One row per session and coefficient: value and 95 % interval, in ms per step or per
    token."""
    rows = [{"session": f.session, "sku": f.sku, "calibration": f.calibration,
             "coefficient": name, "ms": 1e3 * value,
             "low_ms": 1e3 * f.model.interval[name][0],
             "high_ms": 1e3 * f.model.interval[name][1]}
            for f in session_fits(root) for name, value in f.model.coef.items()]
    return pd.DataFrame(rows)


@memoised
def check_steps(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Every step of every check run, with its class and its percent error as predicted by its
    session's calibration."""
    frames = []
    for fit in session_fits(root):
        for run_id in fit.checks:
            steps = _steps(_run(root, run_id))
            frames.append(steps.assign(
                session=fit.session, run=run_id, step_class=step_class(steps).to_numpy(),
                error_pct=percent_error(fit.model.predict(steps),
                                        steps["duration_s"].to_numpy())))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@memoised
def check_cells(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Every greedy cell of every check run with its time per output token and speedup
    predicted from its steps, and their percent errors."""
    frames = []
    for fit in session_fits(root):
        for run_id in fit.checks:
            run = _run(root, run_id)
            cells = run.table("cells.csv")
            cells = cells[(cells["status"] == "ok") & cells["emitted_per_step"].notna()]
            predicted = predict_cells(fit.model, cells, run.manifest["grid"]["max_tokens"])
            frames.append(cells[["workload", "gamma", "batch", "pot_ms", "speedup"]].assign(
                session=fit.session, run=run_id,
                predicted_pot_ms=1e3 * predicted["pot_s"].to_numpy(),
                predicted_speedup=predicted["speedup"].to_numpy()))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out["pot_error_pct"] = percent_error(out["predicted_pot_ms"], out["pot_ms"])
    spec = out["gamma"] > 0
    out["speedup_error_pct"] = np.where(
        spec, percent_error(out["predicted_speedup"].where(spec, 1.0), out["speedup"]), np.nan)
    return out


#: The share curve's step columns (the figure shows them).
_GRID = ("rows", "gamma", "decode_tokens", "draft_tokens", "draft_padded", "prefill_tokens",
         "context_tokens", "decode_pairs", "prefill_pairs")


def share_curve(model: StepTimeModel, rows=(1, 2, 4, 8), gammas=(0, 2, 6),
                context_per_row: float = 500.0) -> pd.DataFrame:
    """The fixed share s0/t_step of a decode step holding ``rows`` rows each verifying γ
    drafts, at a stated context per row."""
    grid = pd.concat([decode_steps(r, g, 1.0, [context_per_row]).assign(rows=r)
                      for r in rows for g in gammas], ignore_index=True)[list(_GRID)]
    grid["tokens_held"] = grid["decode_tokens"] + grid["draft_tokens"]
    grid["t_step_ms"] = 1e3 * model.predict(grid)
    grid["fixed_share"] = model.fixed_share(grid)
    return grid
