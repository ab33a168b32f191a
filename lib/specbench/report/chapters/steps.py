"""The step chapter's numbers: what a step costs as a function of what it holds, per host
session, and how well that predicts another run of the same session (read from
:mod:`specbench.derive.step_fits`; nothing here fits or predicts)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.engine_agreement import SLOWER_BASE_PCT
from specbench.derive.step_fits import check_cells, check_steps, engine_agreement, fit_table, \
    session_fits, share_curve
from specbench.report.numbers import Numbers
from specbench.store.runs import DEFAULT_ROOT
from specbench.theory.errors import mape_of

__all__ = ["STEP_GOAL_PCT", "CELL_GOAL_PCT", "numbers", "coefficients", "class_errors",
           "cell_errors", "shares", "check_steps", "shown", "engines"]

#: Issue goals: a step predicted within 5 % (median absolute, per class), a batch-4 speedup
#: within 5 % (mean absolute).
STEP_GOAL_PCT = 5.0
CELL_GOAL_PCT = 5.0
CLASSES = ("pure decode", "decode with drafts", "mixed with prefill")


def class_errors(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Median absolute percent error per session and step class on the check runs."""
    steps = check_steps(root)
    if steps.empty:
        return pd.DataFrame(columns=["session", "step_class", "steps", "median_abs_error_pct"])
    grouped = steps.assign(abs_error=steps["error_pct"].abs()).groupby(
        ["session", "step_class"])["abs_error"]
    return pd.DataFrame({"steps": grouped.size(), "median_abs_error_pct": grouped.median()}
                        ).reset_index()


def cell_errors(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Mean absolute error of the cells' time per token and speedup, per session and batch."""
    cells = check_cells(root)
    if cells.empty:
        return pd.DataFrame(columns=["session", "batch", "cells", "pot_mape_pct",
                                     "speedup_mape_pct"])
    rows = []
    for (session, batch), group in cells.groupby(["session", "batch"]):
        rows.append({"session": session, "batch": int(batch), "cells": len(group),
                     "pot_mape_pct": mape_of(group["pot_error_pct"]),
                     "speedup_mape_pct": mape_of(group["speedup_error_pct"])})
    return pd.DataFrame(rows)


def coefficients(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Each session's coefficients with their 95 % intervals, in ms per step or per token."""
    return fit_table(root)[["session", "coefficient", "ms", "low_ms", "high_ms"]].rename(
        columns={"session": "host session", "low_ms": "95 % low (ms)",
                 "high_ms": "95 % high (ms)"})


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """A table's columns as the chapter shows them (units in the headers)."""
    return frame.rename(columns={
        "session": "host session", "step_class": "step class",
        "median_abs_error_pct": "median |error| (%)", "pot_mape_pct": "time per token MAPE (%)",
        "speedup_mape_pct": "speedup MAPE (%)"})


def shares(root=DEFAULT_ROOT) -> pd.DataFrame:
    """The fixed share of a decode step per session, rows and γ (context 500 tokens a row)."""
    frames = [share_curve(fit.model).assign(session=fit.session, sku=fit.sku)
              for fit in session_fits(root)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def engines(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Each sweep's plain step on its γ=0 engine and on its speculative engines."""
    return engine_agreement(root).rename(columns={
        "base_plain_ms": "γ=0 engine (ms)", "speculative_plain_ms": "speculative engines (ms)",
        "base_slower_pct": "γ=0 slower by (%)", "engines_agree": "agree"})


def _engine_findings(n: Numbers, table: pd.DataFrame) -> None:
    judged = table.dropna(subset=["base_slower_pct"])
    apart = judged[~judged["engines_agree"]]
    n.add(agreement_runs=len(judged), disagree_count=len(apart),
          engine_limit_pct=SLOWER_BASE_PCT,
          disagree_detail=(f"by up to {apart['base_slower_pct'].max():.0f} percent, left out of "
                           "the fits and checks above" if len(apart) else
                           "none did, so every sweep entered the fits and checks"),
          agree_detail=_agreeing_phrase(judged[judged["engines_agree"]]["base_slower_pct"]))


def _agreeing_phrase(slower: pd.Series) -> str:
    """How the agreeing sweeps' γ=0 engines compared, in words that hold for their numbers."""
    if slower.empty:
        return "no sweep agreed"
    if slower.max() <= 0:
        return f"in the others it was {-slower.max():.0f} to {-slower.min():.0f} percent faster"
    return f"in the others it was at most {slower.max():.0f} percent slower"


def _step_findings(n: Numbers, classes: pd.DataFrame) -> None:
    worst = classes.groupby("step_class")["median_abs_error_pct"].max()
    n.add(**{f"step_error_{c.split()[0]}": float(worst.get(c, np.nan)) for c in CLASSES},
          step_goal=STEP_GOAL_PCT,
          step_verdict="met" if (worst <= STEP_GOAL_PCT).all() else "missed",
          worst_class=str(worst.idxmax()) if len(worst) else "none")
    # the goal per session: every class of its check runs within it
    per_session = classes.groupby("session")["median_abs_error_pct"].max()
    n.add(step_sessions_met=f"{int((per_session <= STEP_GOAL_PCT).sum())} of "
                            f"{len(per_session)}")


def _shift_findings(n: Numbers, steps: pd.DataFrame) -> None:
    """How far a check run sat from its calibration as a whole: the median signed error over
    all its steps. A shift shared by every class is the host's speed between two runs, which
    no model of what a step holds can predict."""
    shift = steps.groupby("run")["error_pct"].median()
    worst = shift.abs().idxmax()
    n.add(step_shift_max=float(abs(shift[worst])), step_shift_runs=len(shift),
          step_shift_over=int((shift.abs() > STEP_GOAL_PCT).sum()),
          step_shift_word="slower" if shift[worst] < 0 else "faster")


def _cell_findings(n: Numbers, cells: pd.DataFrame) -> None:
    by_batch = cells.groupby("batch")["speedup_mape_pct"].max()
    n.add(cell_goal=CELL_GOAL_PCT,
          cell_error_b1=float(by_batch.get(1, np.nan)),
          cell_error_b4=float(by_batch.get(4, np.nan)),
          cell_verdict_b4="met" if by_batch.get(4, np.inf) <= CELL_GOAL_PCT else "missed")


def _share_findings(n: Numbers, fit) -> None:
    curve = share_curve(fit.model)
    one = curve[(curve["rows"] == 1) & (curve["gamma"] == 0)]["fixed_share"].iloc[0]
    most = curve[(curve["rows"] == curve["rows"].max()) &
                 (curve["gamma"] == curve["gamma"].max())]["fixed_share"].iloc[0]
    held = curve["tokens_held"]
    below = curve[curve["fixed_share"] < 0.5]
    n.add(share_one_row_pct=100 * float(one), share_most_pct=100 * float(most),
          most_rows=int(curve["rows"].max()), most_gamma=int(curve["gamma"].max()),
          s0_ms=1e3 * fit.model.coef["s0"],
          half_tokens=(int(below["tokens_held"].min()) if len(below) else int(held.max())),
          stops_fixed=("the fixed part stops dominating inside the measured range"
                       if len(below) else "the fixed part dominates every step measured"))


def _admitted(fits) -> str:
    """Each further term the sessions' records admitted, with in how many of them ('none')."""
    counts: dict[str, int] = {}
    for fit in fits:
        for term, verdict in fit.verdicts.items():
            if verdict.get("admitted"):
                form = verdict.get("form", term)
                counts[form] = counts.get(form, 0) + 1
    return "; ".join(f"{term} in {k} of {len(fits)}" for term, k in counts.items()) or "none"


def numbers(root=DEFAULT_ROOT) -> Numbers:
    """Everything the step chapter glues."""
    n = Numbers()
    fits = session_fits(root)
    n.add(sessions=len(fits), checked=sum(bool(f.checks) for f in fits))
    if not fits:
        raise LookupError(f"{root}: no host session has a sweep with step records and the "
                          "mixed step probe: run `make book` to measure one")
    n.add(runs=[r for f in fits for r in (f.calibration, *f.checks)])
    # The newest calibration is quoted: fits come sorted by session name, not by date.
    quoted = max(fits, key=lambda f: f.calibration.split("-")[1])
    _share_findings(n, quoted)
    n.add(extra_terms=_admitted(fits))
    classes, cells = class_errors(root), cell_errors(root)
    if len(classes):
        _step_findings(n, classes)
        _shift_findings(n, check_steps(root))
    if len(cells):
        _cell_findings(n, cells)
    _engine_findings(n, engine_agreement(root))
    n.add(quoted_session=quoted.session, quoted_sku=quoted.sku)
    return n
