"""The cross-SKU held-out test and its acceptance-free baseline.

Calibrate on one SKU, predict another held out: acceptance is a property of the workload, so
the counter α of each (workload, γ, batch) cell measured on the calibration SKU is applied
unchanged, with the held-out SKU's own γ=0 step and roofline d(γ). The fair comparator
transfers the measured speedup ratio instead: pot = t_base(held-out) / speedup(calibration).
"""
from __future__ import annotations

import pandas as pd

from . import model

__all__ = ["held_out"]

KEY = ["workload", "gamma", "batch"]


def held_out(cells: pd.DataFrame, calibrate: str, target: str) -> pd.DataFrame:
    """Per held-out speculative cell: measured, eq. 1 with transferred α, ratio transfer."""
    cal = cells[(cells["sku"] == calibrate) & (cells["gamma"] > 0)].set_index(KEY)
    tgt = cells[(cells["sku"] == target) & (cells["gamma"] > 0)].set_index(KEY)
    both = tgt.index.intersection(cal.index)
    if both.empty:
        raise ValueError(f"SKUs {calibrate!r} and {target!r} share no speculative cell")
    cal, tgt = cal.loc[both], tgt.loc[both]
    out = pd.DataFrame(index=both)
    out["measured_ms"] = tgt["pot_ms"]
    out["alpha_transferred"] = cal["alpha"]
    out["eq1_ms"] = model.per_token_latency(tgt["t_base_ms"], cal["alpha"],
                                            tgt.index.get_level_values("gamma").to_numpy(),
                                            tgt["d"].fillna(0.0))
    out["ratio_ms"] = tgt["t_base_ms"] / cal["speedup"]
    out["eq1_err_pct"] = model.cell_errors(out["eq1_ms"], out["measured_ms"])
    out["ratio_err_pct"] = model.cell_errors(out["ratio_ms"], out["measured_ms"])
    return out.reset_index()
