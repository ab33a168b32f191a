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

from specbench.theory import model
from specbench.theory.predict import _pot, fit_host_ratio

__all__ = ["leave_one_sku_out", "held_out", "KEY"]

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


def leave_one_sku_out(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per predicted speculative cell of every SKU (greedy cells only).

    ``cells`` is :func:`specbench.report.analysis.sweep_cells` (or any table with its columns)."""
    if "d" not in cells:
        from specbench.theory.predict import add_predictions
        cells = add_predictions(cells)
    cells = cells[cells["temperature"] == 0] if "temperature" in cells else cells
    spec = cells[cells["gamma"] > 0]
    rows = []
    for sku in sorted(spec["sku"].unique()):
        target = spec[spec["sku"] == sku].set_index(KEY)
        others = spec[spec["sku"] != sku]
        if others.empty:
            continue
        pooled = _pooled(others)
        h_ratio = {b: fit_host_ratio(others[others["batch"] == b]) for b in target.index.get_level_values("batch").unique()}
        both = target.index.intersection(pooled.index)
        for key in both:
            t, p = target.loc[key], pooled.loc[key]
            h = h_ratio[key[2]] * t["t_base_ms"]
            rows.append({
                "sku": sku, **dict(zip(KEY, key)), "measured_pot_ms": t["pot_ms"],
                "t_base_ms": t["t_base_ms"], "d": t["d"], "h_ms": h,
                "alpha_transferred": p["alpha"], "alpha_own": t["alpha"],
                "divisor_transferred": p["divisor"], "share_transferred": p["share"],
                "model_pot_ms": _pot(t["t_base_ms"], t["d"], h, p["share"], p["divisor"]),
                "ratio_pot_ms": t["t_base_ms"] / p["speedup"], "from_skus": int(p["skus"])})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["model_err_pct"] = model.cell_errors(out["model_pot_ms"], out["measured_pot_ms"])
    out["ratio_err_pct"] = model.cell_errors(out["ratio_pot_ms"], out["measured_pot_ms"])
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
