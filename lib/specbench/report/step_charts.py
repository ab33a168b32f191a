"""Figures of the step as the unit of cost (draw only: the data come from
:mod:`specbench.derive.step_fits`)."""
from __future__ import annotations

import altair as alt
import pandas as pd

__all__ = ["fixed_share", "step_errors", "MAX_POINTS"]

#: Points drawn in all in the step-error figure, shared equally by the host sessions (below
#: altair's 5,000-row limit however many sessions the store holds).
MAX_POINTS = 4000


def fixed_share(shares: pd.DataFrame) -> alt.Chart:
    """The fixed share s0/t_step of a decode step against the tokens it holds (one decode
    token a row plus γ drafts a row), one line per γ, one point per batch size; one panel per
    host session. Where a line crosses one half, the step stops being mostly fixed."""
    base = alt.Chart(shares)
    half = base.mark_rule(color="gray", strokeDash=[4, 4]).encode(y=alt.datum(0.5))
    lines = base.mark_line(point=True).encode(
        x=alt.X("tokens_held:Q", title="tokens the step holds (rows × (1 + γ))",
                scale=alt.Scale(type="log")),
        y=alt.Y("fixed_share:Q", title="fixed share s0 / t_step", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("gamma:N", title="γ"),
        tooltip=["session", "rows", "gamma", "tokens_held",
                 alt.Tooltip("t_step_ms:Q", format=".1f"),
                 alt.Tooltip("fixed_share:Q", format=".2f")])
    # Panels wrap three to a row, so the store's growing list of host sessions still fits the
    # page's 752-px text column.
    return alt.layer(half, lines).properties(width=180, height=200).facet(
        facet=alt.Facet("session:N", title="host session"), columns=3, data=shares)


def step_errors(steps: pd.DataFrame) -> alt.Chart:
    """Each checked step's percent error against its measured time, by step class: the model
    fitted on one run of the session predicting another."""
    data = steps.assign(duration_ms=1e3 * steps["duration_s"])[
        ["session", "step_class", "duration_ms", "error_pct", "rows", "gamma"]]
    # At most MAX_POINTS in all, an equal share a session, every k-th step in record order: a
    # figure of thousands of points per session shows no more, and the page stays light (the
    # table below counts all).
    share = max(1, MAX_POINTS // max(1, data["session"].nunique()))
    order = data.groupby("session").cumcount()
    every = data.groupby("session")["session"].transform("size").floordiv(share) + 1
    data = data[order % every == 0]
    return alt.Chart(data).mark_point(opacity=0.4, size=12).encode(
        x=alt.X("duration_ms:Q", title="measured step (ms)", scale=alt.Scale(type="log")),
        y=alt.Y("error_pct:Q", title="predicted − measured (%)",
                scale=alt.Scale(domain=[-30, 30], clamp=True)),
        color=alt.Color("step_class:N", title="step class"),
        tooltip=["session", "step_class", "rows", "gamma",
                 alt.Tooltip("duration_ms:Q", format=".1f"),
                 alt.Tooltip("error_pct:Q", format=".1f")]).properties(width=420, height=220)
