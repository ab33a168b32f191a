"""Transfer in three tiers: how far a host's speedups can be predicted from where.

Every Spec-Bench cell of a host session is predicted as :mod:`specbench.derive.step_cost`
predicts a sealed one — its speedup over the paired γ=0 arm is D/(1 + s·c(γ, b)) with c this
host session's own step cost (from its 'repeat'/'edit' cells) — with the tokens per step D and
drafting share s lent from one of three tiers:

* **same host** — the session's own counters for the same prompts (in-sample: it tests the step
  cost alone);
* **same CPU kind** — other host sessions of the same CPU (family and model, any threads or
  dtype);
* **another CPU kind** — host sessions of every other CPU.

Beside each, ratio transfer drawn from the same tier: the geometric mean of the tier's measured
speedups for the same (workload, γ, batch). On the same host that is the cell itself, so the
in-sample tier has no ratio comparator (NaN), unless the table holds the cell twice.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd

from specbench.derive import step_cost
from specbench.derive.transfer import lends
from specbench.store.cache import memoised
from specbench.theory.errors import mape_of, percent_error

__all__ = ["TIERS", "cpu_kind", "tier_predictions", "tier_mape"]

TIERS = ("same host", "same CPU kind", "another CPU kind")


@functools.cache
def cpu_kind(sku: str) -> str:
    """The CPU part of a SKU id: without its threads, dtype and engine suffix."""
    return re.sub(r"-\d+t-.*$", "", sku)


def _questions(cell, requests: pd.DataFrame) -> list[str]:
    """The prompts a cell ran: its batch-1 requests, else its ``requests`` column."""
    if cell.batch == 1 and len(requests):
        mine = requests[(requests["sku"] == cell.sku)
                        & (requests["host_session"] == cell.host_session)
                        & (requests["workload"] == cell.workload)
                        & (requests["gamma"] == cell.gamma)]
        if len(mine):
            return list(dict.fromkeys(mine["request"]))
    return str(getattr(cell, "requests", "") or "").split()


def _tier_of(target, lenders: pd.DataFrame, tier: str) -> pd.Series:
    """Which of ``lenders`` (with a ``cpu_kind`` column) lend to ``target`` in ``tier``."""
    lender_sku, lender_session = lenders["sku"], lenders["host_session"]
    same_host = (lender_sku == target.sku) & (lender_session == target.host_session)
    kind = lenders["cpu_kind"] == cpu_kind(target.sku)
    if tier == "same host":
        return same_host
    if tier == "same CPU kind":
        return kind & ~(lender_session == target.host_session)
    return ~kind


def _with_kind(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(cpu_kind=frame["sku"].map(cpu_kind)) if len(frame) else frame


@memoised   # the index, the story and the accuracy chapter read the same tiers
def tier_predictions(cells: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per Spec-Bench cell × tier that could lend to it: the predicted and measured
    speedups and both errors. ``cells`` is :func:`specbench.derive.analysis.sweep_cells` with
    ``every_session=True`` (or any table with its columns), ``requests``
    :func:`~specbench.derive.analysis.request_predictors` over every run."""
    greedy = cells[cells["temperature"] == 0]
    lender_cells = _with_kind(greedy[lends(greedy["sku"])])
    lender_requests = _with_kind(requests[lends(requests["sku"]) & (requests["temperature"] == 0)]
                                 if len(requests) else requests)
    # Split the lenders once by what a target filters them on (workload, γ, batch), so each
    # of a thousand target × tier lookups filters a handful of rows, not the store.
    cells_at = dict(list(lender_cells.groupby(["workload", "gamma", "batch"])))
    requests_at = (dict(list(lender_requests.groupby(["workload", "gamma"])))
                   if len(lender_requests) else {})
    rows = []
    for (sku, session), host in greedy.groupby(["sku", "host_session"], sort=True):
        cost = step_cost.step_costs(host).set_index(["gamma", "batch"])
        targets = host[host["workload"].str.startswith("specbench:") & (host["gamma"] > 0)]
        dtype = host["dtype"].iloc[0] if "dtype" in host else None
        for t in targets.itertuples():
            if (t.gamma, t.batch) not in cost.index:
                continue
            questions = _questions(t, requests)
            cells_here = cells_at.get((t.workload, t.gamma, t.batch), lender_cells.iloc[0:0])
            requests_here = requests_at.get((t.workload, t.gamma), lender_requests.iloc[0:0])
            for tier in TIERS:
                lc = cells_here[_tier_of(t, cells_here, tier)]
                lr = (requests_here[_tier_of(t, requests_here, tier)]
                      if len(requests_here) else requests_here)
                lent = step_cost.lend(t.workload, t.gamma, t.batch, questions, dtype, lc, lr)
                if lent is None:
                    continue
                speedup, _, _ = step_cost.speedup(lent["per_prompt"], cost.loc[(t.gamma, t.batch),
                                                                              "c"])
                ratio = lc[(lc["workload"] == t.workload) & (lc["gamma"] == t.gamma)
                           & (lc["batch"] == t.batch) & (lc["run_id"] != t.run_id)]["speedup"]
                rows.append({"sku": sku, "host_session": session, "tier": tier,
                             "workload": t.workload, "gamma": t.gamma, "batch": t.batch,
                             "measured_speedup": t.t_base_ms / t.pot_ms,
                             "model_speedup": speedup,
                             "ratio_speedup": float(np.exp(np.log(ratio).mean()))
                             if len(ratio) else np.nan,
                             "lent": lent["lent"], "from_sessions": lent["sessions"]})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["model_err_pct"] = percent_error(out["model_speedup"], out["measured_speedup"])
    ratio = out["ratio_speedup"].notna()
    out["ratio_err_pct"] = np.nan
    out.loc[ratio, "ratio_err_pct"] = percent_error(out.loc[ratio, "ratio_speedup"],
                                                        out.loc[ratio, "measured_speedup"])
    return out


def tier_mape(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per tier and batch: speedup MAPE of the model and of ratio transfer from the same tier,
    over the same cells, with how many cells and host sessions they cover."""
    rows = []
    for (tier, batch), g in predictions.groupby(["tier", "batch"], sort=False):
        rows.append({"tier": tier, "batch": batch, "cells": len(g),
                     "host_sessions": g[["sku", "host_session"]].drop_duplicates().shape[0],
                     "model_mape_pct": mape_of(g["model_err_pct"]),
                     "ratio_mape_pct": mape_of(g["ratio_err_pct"])
                     if g["ratio_err_pct"].notna().any() else np.nan})
    out = pd.DataFrame(rows)
    out["tier"] = pd.Categorical(out["tier"], TIERS, ordered=True)
    return out.sort_values(["tier", "batch"]).reset_index(drop=True)
