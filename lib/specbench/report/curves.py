"""Derived series the figures and chapters show: computed here, drawn by :mod:`charts`.

* :func:`eq1_curves` — eq. 1 over continuous γ for each (SKU, workload, batch);
* :func:`shortfall_split` — the ideal αγ+1 split into measured speedup, verify cost, residual;
* :func:`step_counts` — decode steps and the share of them that drafted, from ``reps.csv``;
* :func:`cycle_costs` — the measured cost of a cycle over t_base with the exact divisor,
  beside the roofline's 1 + d(γ);
* :func:`error_ablation` — mean errors of eq. 1, eq. 1 with d = 0 and the acceptance-blind
  model, per SKU and batch.

Every function takes the cells of :func:`specbench.derive.analysis.sweep_cells` (tidy, one row per
cell) and returns a tidy frame; none reads a latency it predicts.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.theory.counters import DecodeTally, SpecCounters
from specbench.theory import model
from specbench.theory.errors import mape_of, percent_error

__all__ = ["eq1_curves", "shortfall_split", "step_counts", "cycle_costs", "error_ablation",
           "mape_by", "roofline_d"]

KEY = ["workload", "gamma", "batch"]


def _greedy(cells: pd.DataFrame) -> pd.DataFrame:
    """Greedy cells only: the temperature cells are not evidence while the engine fails the
    lossless test."""
    return cells[cells["temperature"] == 0] if "temperature" in cells else cells


_CURVE_GAMMAS = np.linspace(0, 6, 61)


def eq1_curves(cells: pd.DataFrame, gammas=_CURVE_GAMMAS) -> pd.DataFrame:
    """Eq. 1 over continuous γ with each (SKU, workload, batch)'s counter α and t_base,
    and d(γ) interpolated from the cells' roofline values."""
    cells = _greedy(cells)
    rows = []
    for (sku, w, b), g in cells.groupby(["sku_label", "workload", "batch"]):
        spec = g[g["gamma"] > 0]
        if spec.empty:
            continue
        alpha = float(spec["alpha"].mean())
        t_base = float(g["t_base_ms"].iloc[0])
        g = g.sort_values("gamma")
        d = np.interp(gammas, g["gamma"], roofline_d(g))
        rows.append(pd.DataFrame({"sku_label": sku, "workload": w, "batch": b, "gamma": gammas,
                                  "pot_ms": model.per_token_latency(t_base, alpha, gammas, d),
                                  "alpha": alpha}))
    return pd.concat(rows, ignore_index=True)


def shortfall_split(cells: pd.DataFrame, workload: str = "repeat") -> pd.DataFrame:
    """Each speculative cell's ideal αγ+1 as three stacked parts (long format, column
    ``value``): the measured speedup, the share lost to d(γ), and the rest (the residual).
    The parts sum to αγ+1 exactly; a negative residual means the cell beat eq. 1."""
    cells = _greedy(cells)
    c = cells[(cells["workload"] == workload) & (cells["gamma"] > 0)
              & np.isfinite(cells["speedup"])].copy()
    if "temperature" in c:   # greedy cells: the sampled ones have no αγ+1 to split
        c = c[c["temperature"].fillna(0) == 0]
    ideal = c["alpha"] * c["gamma"] + 1
    d = roofline_d(c)
    device = ideal - ideal / (1 + d)
    residual = ideal / (1 + d) - c["speedup"]
    parts = pd.concat([c.assign(part="1 measured speedup", value=c["speedup"]),
                       c.assign(part="2 verify cost d(γ)", value=device),
                       c.assign(part="3 residual", value=residual)], ignore_index=True)
    parts["ideal"] = np.tile(ideal.to_numpy(), 3)
    return parts


def step_counts(reps: pd.DataFrame) -> pd.DataFrame:
    """Per greedy cell of one run's ``reps.csv``: decoded tokens, decode steps, drafting steps
    and the share of steps that drafted (definitions in
    :class:`specbench.engine.counters.DecodeTally`). Only the speculative arm's repetitions
    count (a paired run's base rows have no drafts), and each repetition row is taken to hold
    one call of ``batch`` requests — true of the one-prompt runs this is used on; a run with
    more prompts than its batch has these counts per cell in its cells.csv."""
    if "arm" in reps:
        reps = reps[reps["arm"].fillna("spec") == "spec"]
    if "temperature" in reps:
        reps = reps[reps["temperature"].fillna(0) == 0]
    rows = []
    for key, r in reps.groupby(KEY):
        counters = SpecCounters(int(r["drafts"].sum()), int(r["draft_tokens"].sum()),
                                int(r["accepted_tokens"].sum()))
        tally = DecodeTally(counters, int((r["output_tokens"] - key[2]).sum()))
        rows.append({**dict(zip(KEY, key, strict=True)), "decoded_tokens": tally.decoded_tokens,
                     "decode_steps": tally.decode_steps, "drafting_steps": counters.drafts,
                     "drafting_share": counters.drafts / tally.decode_steps,
                     "short_drafts": counters.draft_tokens - key[1] * counters.drafts,
                     "emitted_per_step": tally.emitted_per_step})
    return pd.DataFrame(rows)


def roofline_d(cells: pd.DataFrame) -> pd.Series:
    """The frozen roofline's d(γ) (``d_roofline`` where the cells carry both it and a
    microbenchmarked d, else ``d``); 0 where the run recorded no shape."""
    return cells["d_roofline" if "d_roofline" in cells else "d"].fillna(0.0)


def cycle_costs(cells: pd.DataFrame) -> pd.DataFrame:
    """Per speculative cell: the measured cost of a step over t_base, with the exact divisor
    (pot · tokens emitted per step / t_base), against the roofline's 1 + d(γ); and the
    per-step residual against the roofline, in ms, with the exact divisor
    (pot·emitted − t_base(1+d)) and with the paper's αγ+1 (pot·(αγ+1) − t_base(1+d))."""
    cells = _greedy(cells)
    c = cells[cells["gamma"] > 0].copy()
    c["step_ms"] = c["pot_ms"] * c["emitted_per_step"]
    c["measured_cost"] = c["step_ms"] / c["t_base_ms"]
    c["roofline_cost"] = 1 + roofline_d(c)
    c["residual_exact_ms"] = c["step_ms"] - c["t_base_ms"] * c["roofline_cost"]
    c["residual_alpha_ms"] = (c["pot_ms"] * (c["alpha"] * c["gamma"] + 1)
                              - c["t_base_ms"] * c["roofline_cost"])
    return c


def _abs_err(pred, measured) -> pd.Series:
    return pd.Series(np.abs(percent_error(pred, measured)), index=measured.index)


def error_ablation(cells: pd.DataFrame) -> pd.DataFrame:
    """Per speculative cell: the absolute error (%) of eq. 1 (roofline d), of eq. 1 with
    d = 0, and of the acceptance-blind model."""
    cells = _greedy(cells)
    c = cells[cells["gamma"] > 0].copy()
    c["eq1_abs_pct"] = _abs_err(
        model.per_token_latency(c["t_base_ms"], c["alpha"], c["gamma"], roofline_d(c)), c["pot_ms"])
    c["eq1_d0_abs_pct"] = _abs_err(
        model.per_token_latency(c["t_base_ms"], c["alpha"], c["gamma"], 0.0), c["pot_ms"])
    c["blind_abs_pct"] = _abs_err(model.device_pass_latency(c["t_base_ms"], c["gamma"]),
                                  c["pot_ms"])
    return c


def mape_by(ablation: pd.DataFrame, by=("sku_label", "batch")) -> pd.DataFrame:
    """MAPE of the three models of :func:`error_ablation`, per group."""
    cols = ["eq1_abs_pct", "eq1_d0_abs_pct", "blind_abs_pct"]
    return ablation.groupby(list(by))[cols].agg(mape_of).reset_index()
