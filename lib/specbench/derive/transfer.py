"""Transfer across SKUs: predict a SKU from what the others measured.

Leave-one-SKU-out: for each SKU held out, every speculative cell is predicted with the
acceptance quantities — α, the counter divisor D and the drafting share s — pooled from the
*other* SKUs' counters for the same (workload, γ, batch), and with the held-out SKU's own γ=0
step t_base, its own verify overhead d (microbenchmark, else roofline) and a host term
h = (h/t_base)·t_base whose ratio is fitted on the other SKUs' speculative cells. Nothing of
the held-out SKU's speculative cells — neither their counters nor their timings — enters its
own predictions. The acceptance-free comparator transfers the speedup instead:
ratio_pot = t_base / (geometric mean of the other SKUs' measured speedups for the cell).

Transfer can fail: where α differs between SKUs only by noise (greedy 'repeat'/'open' on the
same model), it tests d and t_base, not acceptance; the Spec-Bench and 'edit' cells, measured
on several settings, are where counters genuinely vary between runs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.store.cache import memoised
from specbench.theory.errors import percent_error
from specbench.theory.predict import drafting_pot, fit_host_ratio

__all__ = ["leave_one_sku_out", "held_out", "transfer_predictions", "cost_structure", "per_prompt",
           "lends",
           "COST_DIFFERS_PCT", "KEY"]

KEY = ["workload", "gamma", "batch"]


def _pooled(cells: pd.DataFrame) -> pd.DataFrame:
    """Acceptance quantities pooled over SKUs from counters (sums, not means of ratios)."""
    c = cells.assign(decoded=cells["divisor_counters"] * cells["decode_steps"])
    g = c.groupby(KEY)
    out = pd.DataFrame({
        "alpha": g["accepted_tokens"].sum() / g["draft_tokens"].sum().replace(0, np.nan),
        "divisor": g["decoded"].sum() / g["decode_steps"].sum(),
        "share": g["drafts"].sum() / g["decode_steps"].sum(),
        "speedup": g["speedup"].apply(lambda s: float(np.exp(np.log(s).mean()))),
        "skus": g["sku"].nunique()})
    out["alpha"] = out["alpha"].fillna(0.0)
    return out


def lends(skus: pd.Series) -> pd.Series:
    """Which SKUs lend acceptance to a held-out one: vLLM's only. A transformers SKU ('-hf') is
    predicted from them (transfer across engines, the hardest case) but lends nothing."""
    return ~skus.str.endswith("-hf")


def transfer_predictions(target: pd.DataFrame, others: pd.DataFrame) -> pd.DataFrame:
    """Predict the cells of one SKU from the other SKUs' speculative cells.

    ``target`` has one row per (workload, γ, batch) to predict with that SKU's own ``t_base_ms``
    and ``d`` (and any columns to carry along); ``others`` the other SKUs' greedy speculative
    cells. Rows the others never measured are dropped. The one prediction both the
    leave-one-SKU-out evaluation and a sealed prediction (:mod:`specbench.derive.sealed`) make."""
    pooled = _pooled(others).add_suffix("_pooled").reset_index()
    out = target.merge(pooled, on=KEY, how="inner")
    h_ratio = {b: fit_host_ratio(others[others["batch"] == b]) for b in out["batch"].unique()}
    out["h_ms"] = out["batch"].map(h_ratio) * out["t_base_ms"]
    out = out.rename(columns={"alpha_pooled": "alpha_transferred",
                              "divisor_pooled": "divisor_transferred",
                              "share_pooled": "share_transferred", "skus_pooled": "from_skus"})
    out["from_skus"] = out["from_skus"].astype(int)
    out["model_pot_ms"] = drafting_pot(out["t_base_ms"], out["d"], out["h_ms"],
                                       out["share_transferred"], out["divisor_transferred"])
    out["ratio_pot_ms"] = out["t_base_ms"] / out.pop("speedup_pooled")
    return out


@memoised
def leave_one_sku_out(cells: pd.DataFrame, requests: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per predicted speculative cell of every SKU (greedy cells only).

    ``cells`` is :func:`specbench.derive.analysis.sweep_cells` (or any table with its columns);
    with ``requests`` (:func:`specbench.derive.analysis.request_predictors`) batch-1 cells are
    predicted per prompt (:func:`per_prompt`)."""
    if "d" not in cells:
        from specbench.theory.predict import add_predictions
        cells = add_predictions(cells)
    cells = cells[cells["temperature"] == 0] if "temperature" in cells else cells
    spec = cells[cells["gamma"] > 0]
    frames = []
    lenders = lends(spec["sku"])
    for sku in sorted(spec["sku"].unique()):
        others = spec[(spec["sku"] != sku) & lenders]
        if others.empty:
            continue
        own = ["sku", *(["host_session"] if "host_session" in spec else []), *KEY]
        target = spec.loc[spec["sku"] == sku, [*own, "pot_ms", "t_base_ms", "d", "alpha"]]
        frames.append(transfer_predictions(
            target.rename(columns={"pot_ms": "measured_pot_ms", "alpha": "alpha_own"}), others))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if out.empty:
        return out
    out["per_prompt"] = False
    if requests is not None and len(requests):
        out = per_prompt(out, requests)
    out["model_err_pct"] = percent_error(out["model_pot_ms"], out["measured_pot_ms"])
    out["ratio_err_pct"] = percent_error(out["ratio_pot_ms"], out["measured_pot_ms"])
    return out


def per_prompt(loso: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """Batch-1 transfer per prompt: each request of the held-out cell is predicted with the
    tokens per step and drafting share *that same prompt* (question id) reached on the other
    SKUs, and its own γ=0 step; the cell's prediction is the mean over its requests, as its
    latency is. Requests no other SKU ran keep the cell's pooled prediction. Where SKUs ran
    different numbers of prompts per category, a pooled divisor is not the held-out cell's."""
    key = ["workload", "gamma", "request"]
    r = requests[(requests["batch"] == 1) & (requests["temperature"] == 0)]
    out = loso.copy()
    for i, row in out[out["batch"] == 1].iterrows():
        mine = r[(r["sku"] == row["sku"]) & (r["workload"] == row["workload"])
                 & (r["gamma"] == row["gamma"])]
        if "host_session" in mine and "host_session" in row:   # the cell's own host's requests
            mine = mine[mine["host_session"] == row["host_session"]]
        if mine.empty:
            continue
        others = (r[(r["sku"] != row["sku"]) & lends(r["sku"])
                    & (r["workload"] == row["workload"])
                    & (r["gamma"] == row["gamma"])]
                  .groupby(key)[["divisor", "share"]].mean())
        delta_ms, h_ratio = row["d"] * row["t_base_ms"], row["h_ms"] / row["t_base_ms"]
        preds = []
        for q in mine.itertuples():
            if (q.workload, q.gamma, q.request) not in others.index:
                preds.append(np.nan)
                continue
            o = others.loc[(q.workload, q.gamma, q.request)]
            preds.append((q.base_ms + o["share"] * (delta_ms + h_ratio * q.base_ms))
                         / o["divisor"])
        preds = np.asarray(preds, dtype=float)
        if np.isnan(preds).all():
            continue
        # A request no other SKU ran keeps the pooled cell's prediction.
        out.loc[i, "model_pot_ms"] = float(np.where(np.isnan(preds), row["model_pot_ms"],
                                                    preds).mean())
        out.loc[i, "per_prompt"] = True
    return out


def held_out(cells: pd.DataFrame, calibrate: str, target: str) -> pd.DataFrame:
    """One calibration SKU, one held-out SKU: leave-one-SKU-out restricted to the pair."""
    pair = cells[cells["sku"].isin([calibrate, target])]
    if pair[pair["sku"] == calibrate].empty or pair[pair["sku"] == target].empty:
        raise ValueError(f"SKUs {calibrate!r} and {target!r} share no speculative cell")
    out = leave_one_sku_out(pair)
    out = out[out["sku"] == target]
    if out.empty:
        raise ValueError(f"SKUs {calibrate!r} and {target!r} share no speculative cell")
    return out.reset_index(drop=True)


# A held-out SKU tests transfer only if its balance of fixed and compute cost differs from the
# SKUs it is predicted from: its d(4) or its h/t_base at least this far from every one of them.
COST_DIFFERS_PCT = 25.0


def cost_structure(cells: pd.DataFrame) -> pd.DataFrame:
    """Per SKU and batch — the step-cost decomposition: the γ=0 step t_base (median over the
    SKU's cells), the verify overhead d(4) (mean over its workloads), the host
    ratio h/t_base fitted on its own greedy cells, and whether either differs by at least
    :data:`COST_DIFFERS_PCT` from every other SKU's at the same batch."""
    if "d" not in cells:
        from specbench.theory.predict import add_predictions
        cells = add_predictions(cells)
    greedy = cells[cells["temperature"] == 0] if "temperature" in cells else cells
    rows = [{"sku": sku, "batch": b, "t_base_ms": g["t_base_ms"].median(),
             "d4": g.loc[g["gamma"] == 4, "d"].mean(),
             "h_ratio": fit_host_ratio(g)} for (sku, b), g in greedy.groupby(["sku", "batch"])]
    out = pd.DataFrame(rows)

    def apart(mine: float, theirs: pd.Series) -> bool:
        theirs = theirs.dropna()
        if np.isnan(mine) or theirs.empty:
            return False
        scale = np.maximum(np.abs(theirs), 1e-9)
        return bool((100 * np.abs(mine - theirs) / scale >= COST_DIFFERS_PCT).all())

    out["cost_differs"] = [
        apart(r.d4, out[(out["batch"] == r.batch) & (out["sku"] != r.sku)]["d4"])
        or apart(r.h_ratio, out[(out["batch"] == r.batch) & (out["sku"] != r.sku)]["h_ratio"])
        for r in out.itertuples()]
    return out
