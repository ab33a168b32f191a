"""Figures of the host as the unit of evidence: one SKU measured on two host sessions."""
from __future__ import annotations

import altair as alt
import pandas as pd

__all__ = ["twin_hosts"]


def _panel(data: pd.DataFrame, a: str, b: str, title: str, log: bool) -> alt.LayerChart:
    lo = 0.9 * float(data[[a, b]].min().min())
    hi = 1.1 * float(data[[a, b]].max().max())
    scale = alt.Scale(type="log" if log else "linear", domain=[lo, hi])
    diagonal = alt.Chart(pd.DataFrame({"x": [lo, hi]})).mark_line(
        color="gray", strokeDash=[4, 4]).encode(x="x:Q", y="x:Q")
    points = alt.Chart(data).mark_point(filled=True, size=60, opacity=0.8).encode(
        x=alt.X(f"{a}:Q", title=f"{title}, host A", scale=scale),
        y=alt.Y(f"{b}:Q", title=f"{title}, host B", scale=scale),
        color=alt.Color("batch:N", title="batch"),
        shape=alt.Shape("sku_label:N", title="SKU"),
        tooltip=["sku_label", "host_a", "host_b", "workload", "gamma", "batch",
                 alt.Tooltip(a, format=".2f"), alt.Tooltip(b, format=".2f")])
    return alt.layer(diagonal, points).properties(width=220, height=220)


def twin_hosts(pairs: pd.DataFrame) -> alt.HConcatChart:
    """Each SKU measured on two host sessions (:func:`specbench.report.chapters.accuracy.
    twin_hosts`): left, the γ=0 step of every workload × batch on host B against host A (log
    axes); right, the speedup over the paired γ=0 arm of every workload × γ × batch. On the
    gray diagonal the two hosts agree."""
    step = pairs[pairs["gamma"] == 0]
    spec = pairs[pairs["gamma"] > 0]
    return alt.hconcat(
        _panel(step, "t_base_ms_a", "t_base_ms_b", "γ=0 step (ms)", log=True),
        _panel(spec, "speedup_a", "speedup_b", "speedup", log=False)).properties(
        title="One SKU on two host sessions: on the diagonal they agree").configure_legend(
        labelLimit=0)
