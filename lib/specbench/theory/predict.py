"""Predictions of every speculative cell, their ablations and the per-cycle host term.

The headline model (named here once, before it meets new runs) is

    pot = t_base·(1 + s·(d + h/t_base)) / D                                   (HEADLINE)

* D — tokens emitted per decode step, from the engine's counters and token counts, never from
  timing (:func:`specbench.derive.sweep_tables.decode_steps` says how the max-tokens cut-off is
  handled);
  the paper's closed form αγ+1 is its idealisation and is shown beside it;
* t_base — the γ=0 step of the same workload and batch, measured in calls interleaved with the
  cell's own (paired) where the run has them, else the γ=0 cell of the same run;
* d — the verify overhead from microbenchmarks of the engine's own kernels at the verify
  shapes (:mod:`specbench.measure.microbench`) where the SKU has such a run, else the frozen
  roofline recorded in the run's manifest (``d_source`` says which);
* s — the share of decode steps that drafted (counters): a step whose n-gram lookup found
  nothing verifies one row and costs t_base, so the verify overhead d and the host term h are
  paid by drafting steps only (the paper's eq. 1 charges d to every step);
* h — a per-cycle host cost paid by each drafting step (proposer lookup, rejection sampling,
  draft bookkeeping), estimated robustly (:func:`fit_host_ratio`) from the *other* workloads
  of the same SKU and batch that identify it (:func:`identifying`; leave-one-workload-out),
  never from the cell it predicts.

At batch 1, where the run has per-request counters, the model predicts each request and
averages the predictions over requests, as the measurement averages requests (1/D is convex,
so averaging α first would bias the prediction). At batch > 1 requests share steps and the
cell is predicted from its pooled counters.

Rivals and ablations on the same cells: the paper's eq. 1 (αγ+1, roofline d, h = 0), the
acceptance-blind t_base/(γ+1), and the headline with d = 0, with the roofline d, and without h.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.theory.errors import percent_error

__all__ = ["HEADLINE", "MODELS", "MIN_IDENTIFYING_SHARE", "add_predictions", "drafting_pot",
           "fit_host_ratio", "host_ratio_sensitivity", "identifying", "cell_interval"]

HEADLINE = "model"
MODELS = {
    "model": "headline: counter divisor, microbenchmarked d, cross-fitted h",
    "no_h": "counter divisor, microbenchmarked d, h = 0",
    "d_roofline": "counter divisor, frozen-roofline d, h = 0",
    "d_zero": "counter divisor, d = 0, h = 0",
    "eq1": "the paper's eq. 1: αγ+1, frozen-roofline d",
    "blind": "acceptance-blind: t_base/(γ+1)",
}


#: Where a cell's host session has no kernel microbenchmark, d is the frozen roofline's.
ROOFLINE_D = "roofline (no microbenchmark on this host session)"


def drafting_pot(t_base, d, h, share, divisor):
    """Per-token latency when a share ``share`` of the steps drafts and pays d and h."""
    return (t_base * (1 + share * d) + share * h) / divisor


# h is identified only by cells that draft often enough: a residual of a few percent on a cell
# whose steps draft 7 % of the time would become a host cost of half a step. Below this drafting
# share a cell does not enter the fit (and a SKU whose other workloads all lie below it gets
# h = 0, the eq.-1 assumption, rather than a guess).
MIN_IDENTIFYING_SHARE = 0.2


def identifying(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells that may enter the fit of h: speculative, greedy or sampled alike, drafting on
    at least :data:`MIN_IDENTIFYING_SHARE` of their steps, and not flagged unstable (their
    repetitions disagree; :mod:`specbench.derive.sweep_tables`)."""
    c = cells[(cells["gamma"] > 0) & (cells["drafting_share"] >= MIN_IDENTIFYING_SHARE)]
    if "unstable" in c:
        c = c[~c["unstable"].eq(True)]
    return c


def fit_host_ratio(cells: pd.DataFrame) -> float:
    """h/t_base from the identifying cells: the median of each cell's own estimate
    (pot·D − t_base(1+s·d)) / (t_base·s) — a slope through the origin that one disturbed cell
    cannot move far (the least-squares slope it replaces followed the cells with the largest
    share, one bad cell included). A negative median (speculation's extra work cheaper than
    nothing) is not a cost and is clipped to 0."""
    c = identifying(cells)
    if c.empty:
        return 0.0
    r = (c["pot_ms"] * c["divisor_counters"]
         - c["t_base_ms"] * (1 + c["drafting_share"] * c["d"])) / c["t_base_ms"]
    return float(max(0.0, (r / c["drafting_share"]).median()))


def host_ratio_sensitivity(cells: pd.DataFrame) -> pd.DataFrame:
    """Per SKU and batch: h/t_base from every identifying greedy cell, and the largest change
    when any single one of them is left out (how much one cell can move h)."""
    rows = []
    for (sku, b), group in cells[cells["temperature"] == 0].groupby(["sku", "batch"]):
        c = identifying(group)
        h = fit_host_ratio(group)
        moves = [abs(fit_host_ratio(c.drop(index=i)) - h) for i in c.index] if len(c) > 1 else []
        rows.append({"sku": sku, "batch": b, "cells": len(c), "h_ratio": h,
                     "max_move": max(moves) if moves else np.nan})
    return pd.DataFrame(rows)


def _host(cells: pd.DataFrame) -> list[str]:
    """The columns naming where a cell was measured: its SKU, and its host session where the
    table has one (a host term is one host's, never pooled across hosts of a CPU kind)."""
    return ["sku", "host_session"] if "host_session" in cells else ["sku"]


def _cross_fitted_h(cells: pd.DataFrame) -> pd.Series:
    """h/t_base for each cell from the other workloads of its SKU, host session and batch."""
    out = pd.Series(0.0, index=cells.index)
    for _, group in cells.groupby([*_host(cells), "batch"]):
        for w in group["workload"].unique():
            others = group[(group["workload"] != w) & (group["temperature"] == 0)]
            out[group.index[group["workload"] == w]] = fit_host_ratio(others)
    return out


def add_predictions(cells: pd.DataFrame, requests: pd.DataFrame | None = None) -> pd.DataFrame:
    """Add every model's prediction and error to a table of cells (see the module text).

    ``cells`` needs sku, workload, gamma, batch, temperature, pot_ms, t_base_ms, alpha,
    divisor_counters, drafting_share, d_micro and d_roofline; ``requests`` (optional) the
    per-request rows of batch-1 paired cells (sku, workload, gamma, batch, request, base_ms,
    divisor, share)."""
    c = cells.copy()
    c["divisor_closed_form"] = c["alpha"] * c["gamma"] + 1
    c["d_source"] = np.where(c["d_micro"].notna(), "microbenchmark",
                             np.where(c["d_roofline"].notna(), ROOFLINE_D, "none"))
    c["d"] = c["d_micro"].fillna(c["d_roofline"])
    c["h_ratio"] = _cross_fitted_h(c)
    c["h_ms"] = c["h_ratio"] * c["t_base_ms"]
    c["pred_model_ms"] = drafting_pot(c["t_base_ms"], c["d"], c["h_ms"], c["drafting_share"],
                                      c["divisor_counters"])
    share = c["drafting_share"]
    c["pred_no_h_ms"] = drafting_pot(c["t_base_ms"], c["d"], 0, share, c["divisor_counters"])
    # Without a roofline (unknown hardware or shape) these stay empty, never d = 0.
    c["pred_d_roofline_ms"] = drafting_pot(c["t_base_ms"], c["d_roofline"], 0, share,
                                           c["divisor_counters"])
    c["pred_d_zero_ms"] = drafting_pot(c["t_base_ms"], 0, 0, share, c["divisor_counters"])
    # The paper's eq. 1 as written: every step pays d, and emits αγ+1 tokens.
    c["pred_eq1_ms"] = drafting_pot(c["t_base_ms"], c["d_roofline"], 0, 1.0,
                                    c["divisor_closed_form"])
    c["pred_blind_ms"] = c["t_base_ms"] / (c["gamma"] + 1)
    c["per_request"] = False
    if requests is not None and len(requests):
        c = _per_request(c, requests)
    for m in MODELS:
        c[f"err_{m}_pct"] = percent_error(c[f"pred_{m}_ms"], c["pot_ms"])
    c["model_pot_ms"] = c[f"pred_{HEADLINE}_ms"]
    return c


def _per_request(c: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """Batch-1 cells with per-request counters: predict each request, then average."""
    key = [*_host(c), "workload", "gamma", "batch", "temperature"]
    if not set(key) <= set(requests):
        key = ["sku", "workload", "gamma", "batch", "temperature"]
    r = requests.merge(c[key + ["d_micro", "d_roofline", "h_ratio"]], on=key, how="inner")
    if r.empty:
        return c
    # d was measured as an absolute extra time per step; per request it scales with t_base.
    delta = c.set_index(key)["d"] * c.set_index(key)["t_base_ms"]
    r["delta_ms"] = [delta.get(tuple(k), np.nan) for k in r[key].itertuples(index=False)]
    r["pred_model_ms"] = (r["base_ms"] + r["share"] * (r["delta_ms"] + r["h_ratio"]
                                                          * r["base_ms"])) / r["divisor"]
    r["pred_no_h_ms"] = (r["base_ms"] + r["share"] * r["delta_ms"]) / r["divisor"]
    r["pred_d_zero_ms"] = r["base_ms"] / r["divisor"]
    means = r.groupby(key)[["pred_model_ms", "pred_no_h_ms", "pred_d_zero_ms"]].mean()
    idx = c.set_index(key).index
    hit = idx.isin(means.index)
    for col in means.columns:
        c.loc[hit, col] = means.loc[idx[hit], col].to_numpy()
    c.loc[hit, "per_request"] = True
    return c


def cell_interval(values, resamples: int = 2000, seed: int = 0, level: float = 0.95):
    """Percentile-bootstrap interval of the median of a cell's repetitions (scipy; BCa is
    undefined for a median of a handful of ties). With fewer than three repetitions, or all
    equal: their range."""
    from scipy import stats
    v = np.asarray(values, dtype=float)
    if v.size < 3 or np.ptp(v) == 0:
        return float(v.min()), float(v.max())
    res = stats.bootstrap((v,), np.median, n_resamples=resamples, confidence_level=level,
                          method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
