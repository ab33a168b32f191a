"""Figures of the draft-model chapter (draw only: the data come from
:mod:`specbench.derive.drafts`)."""
from __future__ import annotations

import altair as alt
import pandas as pd

__all__ = ["parity"]


def parity(long: pd.DataFrame) -> alt.Chart:
    """Predicted against measured speedup, one panel per predictor, one point per cell; the
    grey diagonal is a perfect prediction and the dashed lines mark speedup 1 (no gain)."""
    top = float(max(long["speedup"].max(), long["predicted"].max())) * 1.05
    low = float(min(long["speedup"].min(), long["predicted"].min())) * 0.95
    scale = alt.Scale(domain=[low, top])
    base = alt.Chart(long)
    diagonal = alt.Chart(pd.DataFrame({"x": [low, top]})).mark_line(color="gray").encode(
        x="x:Q", y="x:Q")
    one = base.mark_rule(strokeDash=[4, 4], color="gray").encode(y=alt.datum(1.0))
    points = base.mark_point(filled=True, size=40).encode(
        x=alt.X("speedup:Q", title="measured speedup", scale=scale),
        y=alt.Y("predicted:Q", title="predicted speedup", scale=scale),
        color=alt.Color("depth:N", title="draft depth"),
        shape=alt.Shape("batch:N", title="batch"),
        tooltip=["workload", "depth", "batch", "gamma",
                 alt.Tooltip("speedup:Q", format=".3f"),
                 alt.Tooltip("predicted:Q", format=".3f")])
    return alt.layer(diagonal, one, points).properties(width=220, height=220).facet(
        facet=alt.Facet("predictor:N", title=None), columns=2, data=long)
