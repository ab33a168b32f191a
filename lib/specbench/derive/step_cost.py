"""Speedup from the host's own step cost, with acceptance lent per prompt from other hosts.

A host's `make book` sweep measures, at each γ and batch, what a drafting step costs over a
plain one: 'repeat' drafts on every step at α≈1 and 'edit' on about three quarters, so from
pot·D = t_base·(1 + s·c) each such cell gives

    c(γ, b) = (pot·D/t_base − 1) / s                                           (STEP COST)

(t_base the paired γ=0 arm of the same calls, D tokens per step and s the drafting share from
the counters). The cells' median is the host's c; the kernel microbenchmark says which part of
it is verify compute (d), the rest is host work (proposer, bookkeeping) *as this host did it*.
Another workload on the same host then differs only by what transfers between hosts — tokens
per step D and drafting share s, properties of the prompt, model and dtype — and its speedup
over the paired γ=0 arm is

    speedup = D / (1 + s·c(γ, b))                                              (SPEEDUP)

D and s are lent per prompt (Spec-Bench question id) at batch 1 from other hosts' per-request
counters, averaged over the hosts that ran the prompt (same dtype where any did, else any
dtype); the cell's speedup is the harmonic mean over its prompts (its latency averages
requests, and the prompts' γ=0 steps are taken equal). At batch 4, where requests share steps,
the lenders' pooled cell counters are used: cells of the same question ids where one exists,
else every cell of the category (``lent`` says which). A latency follows as paired t_base /
speedup.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.theory.predict import MIN_IDENTIFYING_SHARE

__all__ = ["CALIBRATION_WORKLOADS", "IDENTIFYING_WORKLOADS", "cell_step_costs", "step_costs",
           "question_order", "target_questions", "lend", "speedup"]

#: What `make book`'s sweep measures: the calibration, never a predicted workload.
CALIBRATION_WORKLOADS = ("repeat", "open", "edit")
#: The calibration cells that draft often enough to identify c ('open' drafts on few steps).
IDENTIFYING_WORKLOADS = ("repeat", "edit")


def cell_step_costs(cells: pd.DataFrame) -> pd.DataFrame:
    """Each identifying cell's own step cost c (greedy, γ>0, 'repeat'/'edit', drafting on at
    least :data:`MIN_IDENTIFYING_SHARE` of its steps); cells flagged unstable (repetitions
    that disagree) only where a (γ, batch) has no stable one, and then said in
    ``c_from_unstable`` — a noisy host's cost is still its own, and better than another's."""
    c = cells[cells["workload"].isin(IDENTIFYING_WORKLOADS) & (cells["gamma"] > 0)
              & (cells["temperature"] == 0)
              & (cells["drafting_share"] >= MIN_IDENTIFYING_SHARE)].copy()
    c["c_from_unstable"] = c["unstable"].eq(True) if "unstable" in c else False
    stable = c[~c["c_from_unstable"]].groupby(["gamma", "batch"]).size()
    has_stable = [stable.get((g, b), 0) > 0 for g, b in zip(c["gamma"], c["batch"], strict=True)]
    c = c[~(c["c_from_unstable"] & pd.Series(has_stable, index=c.index))]
    c["c"] = (c["pot_ms"] * c["divisor_counters"] / c["t_base_ms"] - 1) / c["drafting_share"]
    return c


def step_costs(cells: pd.DataFrame, verify: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (γ, batch): the step cost c (median over the identifying cells), how many cells
    gave it, whether they were unstable ones, the γ=0 step t_base they were paired with
    (median), and — with a microbenchmark's verify table — the verify compute
    d = delta_ms/t_base and the host part c − d."""
    per_cell = cell_step_costs(cells)
    out = (per_cell.groupby(["gamma", "batch"])
           .agg(c=("c", "median"), c_cells=("c", "size"),
                c_from_unstable=("c_from_unstable", "all"), t_base_ms=("t_base_ms", "median"))
           .reset_index())
    if verify is not None and len(verify):
        delta = verify.set_index(["batch", "gamma"])["delta_ms"]
        out["d"] = [delta.get((b, g), np.nan) / t
                    for b, g, t in zip(out["batch"], out["gamma"], out["t_base_ms"], strict=True)]
    else:
        out["d"] = np.nan
    out["host_part"] = out["c"] - out["d"]
    return out


def question_order(requests: pd.DataFrame) -> dict[str, list[str]]:
    """Per workload, the question ids in the order a sweep selects them (the spread order of
    :mod:`specbench.measure.workloads.spec_bench`): the batch-1 call order of the run that ran
    the most prompts. A sweep with ``--prompts N`` takes the first N that fit the context, so
    any host's first N are these."""
    order: dict[str, list[str]] = {}
    r = requests[requests["batch"] == 1]
    for (workload, _), g in r.groupby(["workload", "run_id"], sort=True):
        ids = list(dict.fromkeys(g.sort_values("call")["request"]))
        if len(ids) > len(order.get(workload, [])):
            order[workload] = ids
    return order


def target_questions(order: list[str], prompts: int, batch: int) -> list[str]:
    """The question ids a sweep with ``prompts`` runs at ``batch``: at least a full batch
    (:func:`specbench.measure.sweep._select`)."""
    wanted = -(-max(prompts, batch) // batch) * batch
    return order[:wanted]


def _same_dtype_else_any(rows: pd.DataFrame, dtype: str | None) -> pd.DataFrame:
    same = rows[rows["dtype"] == dtype] if dtype is not None else rows.iloc[0:0]
    return same if len(same) else rows


def _pooled(cells: pd.DataFrame) -> tuple[float, float]:
    """Tokens per step and drafting share pooled over cells (sums of steps, not means)."""
    steps = cells["decode_steps"].sum()
    return (float((cells["divisor_counters"] * cells["decode_steps"]).sum() / steps),
            float(cells["drafts"].sum() / steps))


def lend(workload: str, gamma: int, batch: int, questions: list[str], dtype: str | None,
         lender_cells: pd.DataFrame, lender_requests: pd.DataFrame) -> dict | None:
    """D and s for one target cell from the lenders (other hosts): per prompt at batch 1,
    pooled cell counters at batch > 1. Per-prompt pairs come back in ``per_prompt`` (the cell's
    speedup is their harmonic mean); None where no lender measured the cell."""
    cells = lender_cells[(lender_cells["workload"] == workload)
                         & (lender_cells["gamma"] == gamma) & (lender_cells["batch"] == batch)
                         & (lender_cells["temperature"] == 0)]
    if cells.empty:
        return None
    cells = _same_dtype_else_any(cells, dtype)
    sessions = int(cells["host_session"].nunique())
    pooled_d, pooled_s = _pooled(cells)
    if batch == 1 and len(lender_requests):
        r = lender_requests[(lender_requests["workload"] == workload)
                            & (lender_requests["gamma"] == gamma)
                            & (lender_requests["temperature"] == 0)]
        pairs, lent_by = [], 0
        for q in questions:
            mine = _same_dtype_else_any(r[r["request"] == q], dtype)
            if mine.empty:
                pairs.append((pooled_d, pooled_s))
                continue
            lent_by += 1
            pairs.append((float(mine["divisor"].mean()), float(mine["share"].mean())))
        if lent_by:
            return {"per_prompt": pairs, "sessions": sessions,
                    "lent": f"per prompt ({lent_by} of {len(questions)} question ids; "
                            "the rest category pooled)" if lent_by < len(questions)
                    else f"per prompt ({lent_by} question ids)"}
    if batch > 1 and "requests" in cells:
        wanted = " ".join(sorted(questions))
        same = cells[cells["requests"].map(lambda s: " ".join(sorted(str(s).split()))) == wanted]
        if len(same):
            d, s = _pooled(same)
            return {"per_prompt": [(d, s)], "sessions": int(same["host_session"].nunique()),
                    "lent": "cell counters of the same question ids"}
    return {"per_prompt": [(pooled_d, pooled_s)], "sessions": sessions,
            "lent": "category pooled (other question ids)"}


def speedup(pairs: list[tuple[float, float]], c: float) -> tuple[float, float, float]:
    """The cell's predicted speedup (harmonic mean over its prompts of D/(1 + s·c)) and the
    mean lent D and s, for the record."""
    d = np.array([p[0] for p in pairs], dtype=float)
    s = np.array([p[1] for p in pairs], dtype=float)
    per_prompt = d / (1 + s * c)
    return float(1 / np.mean(1 / per_prompt)), float(d.mean()), float(s.mean())
