"""Altair figure builders: one function per figure, fed tidy frames from :mod:`analysis`
and :mod:`curves`. Charts only draw: every derived series (eq. 1 curves, the shortfall split)
is computed in :mod:`curves`.

Every chart encodes the SKU as the point shape, so a new run of new hardware appears in every
figure without editing a chapter. :func:`use_offline_renderer` makes notebooks emit each chart
as HTML that calls the page's own vega-embed (served from ``book/_static``, no CDN) plus a PNG
fallback for PDF builds; its element id is a hash of the spec, so outputs are reproducible.
"""
from __future__ import annotations

import base64
import hashlib
import json

import altair as alt
import numpy as np
import pandas as pd

from specbench.report.curves import eq1_curves, shortfall_split
from specbench.report.tables import SCROLL_HINT
from specbench.theory import model

__all__ = ["use_offline_renderer", "fig1_headline", "fig1_speedup", "fig2_latency",
           "fig3_shortfall", "fig4_host_floor", "fig5_timing_alpha", "fig6_parity", "fig_economics",
           "fig_model_limits", "eq1_curves", "speedup_vs_alpha", "parity", "fig_break_even",
           "fig_serving_percentiles", "fig_serving_goodput", "fig_serving_speedup", "spec_digest"]

WORKLOAD_COLORS = alt.Scale(domain=["repeat", "open"], range=["#1f77b4", "#d62728"])
WIDTH = 190   # two facets and a legend on the right fit the 752-px text column


# A chart's digest hashes its spec with every float rounded to this many significant digits, so
# the same data summed in another order on another CPU (a last-bit difference) draws the same
# chart and keeps its digest, while a change in any printed digit changes it.
DIGEST_DIGITS = 8


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{DIGEST_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _renamed(value, names: dict):
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, dict):
        return {names.get(k, k): _renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    return value


def spec_digest(spec: dict) -> str:
    """A chart's identity: its spec with floats rounded (:data:`DIGEST_DIGITS`) and altair's
    inline datasets — named by a hash of their exact values — renamed by a hash of their
    rounded values."""
    rounded = _rounded(spec)
    names = {name: "data-" + hashlib.sha256(json.dumps(values, sort_keys=True).encode())
             .hexdigest()[:32] for name, values in rounded.get("datasets", {}).items()}
    text = json.dumps(_renamed(rounded, names), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _render(spec: dict, png: bool = True) -> dict:
    digest = spec_digest(spec)
    div = f"vega-{digest}"
    html = (f'<div class="sb-scroll"><p class="sb-scroll-hint">{SCROLL_HINT}</p>'
            f'<div id="{div}" class="vega-chart"></div></div>\n<script>\n'
            f'(function() {{\n  const spec = {json.dumps(spec)};\n'
            f'  const el = document.getElementById("{div}");\n'
            '  if (typeof vegaEmbed === "undefined") { el.innerHTML = "<pre class=\'vega-error\'>'
            'vega-embed is not loaded (book/_static/vega-bundle.js)</pre>"; return; }\n'
            '  vegaEmbed(el, spec, {actions: false, renderer: "svg"}).then(function() {\n'
            '    if (window.specbenchMarkOverflow) window.specbenchMarkOverflow();\n'
            '  }).catch(function(err) {\n'
            '    el.innerHTML = "<pre class=\'vega-error\'>" + err + "</pre>";\n'
            '    console.error(err);\n  });\n})();\n</script>')
    bundle = {"text/html": html, "text/plain": f"<chart {digest}>"}
    if png:
        import vl_convert as vlc
        bundle["image/png"] = base64.b64encode(vlc.vegalite_to_png(spec, scale=1.5)).decode()
    return bundle


def use_offline_renderer(png: bool = True) -> None:
    """Render charts for the offline book: vega-embed from the page, PNG for PDF builds."""
    alt.renderers.register("specbench", lambda spec, **_: _render(spec, png))
    alt.renderers.enable("specbench")


def regime_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """The cells of the two bracketing workloads ('repeat', 'open'), greedy: the figures of the
    regimes story. Every workload is in the acceptance chapter's figures."""
    keep = cells["workload"].isin(["repeat", "open"])
    if "temperature" in cells:
        keep &= cells["temperature"] == 0
    return cells[keep]


def _shape(cells):
    return alt.Shape("sku_label:N", title="SKU")


def fig1_headline(cells: pd.DataFrame) -> alt.FacetChart:
    """Figure 1, the study's headline: measured speedup against the tokens a decode step emits
    (from the counters), every greedy speculative cell of every SKU, by batch; the dashed line
    is speedup = tokens per step (a step that costs what a plain step costs)."""
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)
                 & cells["speedup"].notna()]
    data = spec[["sku_label", "workload", "batch", "gamma", "speedup", "divisor_counters",
                 "alpha"]].rename(columns={"divisor_counters": "tokens_per_step"})
    ideal = alt.Chart().mark_line(strokeDash=[4, 4], color="gray").encode(
        x="tokens_per_step:Q", y="tokens_per_step:Q")
    one = alt.Chart().mark_rule(color="black", opacity=0.4).encode(y=alt.datum(1))
    points = alt.Chart().mark_point(filled=True, size=45, opacity=0.8).encode(
        x=alt.X("tokens_per_step:Q", title="tokens emitted per step (counters)"),
        y=alt.Y("speedup:Q", title="measured speedup over γ=0"),
        color=alt.Color("sku_label:N", title="SKU", legend=alt.Legend(labelLimit=0)),
        tooltip=["sku_label", "workload", "batch", "gamma",
                 alt.Tooltip("tokens_per_step", format=".2f"),
                 alt.Tooltip("alpha", title="counter α", format=".2f"),
                 alt.Tooltip("speedup", format=".2f")])
    return alt.layer(ideal, one, points, data=data).properties(width=WIDTH, height=240).facet(
        column=alt.Column("batch:N", title="batch")).properties(
        title="Speedup follows the tokens a step emits").configure_legend(
        orient="right", labelLimit=0)


def fig1_speedup(cells: pd.DataFrame) -> alt.FacetChart:
    """Figure 1: measured speedup over γ=0 versus γ, per workload, SKU and batch."""
    cells = regime_cells(cells)
    data = cells[["sku_label", "workload", "batch", "gamma", "speedup", "alpha"]]
    base = alt.Chart().encode(x=alt.X("gamma:Q", title="γ (draft tokens per step)",
                                      axis=alt.Axis(tickMinStep=1)))
    # Facets need one data source for every layer: the ideal line is computed from it.
    ideal = base.transform_calculate(ideal="datum.gamma + 1").mark_line(
        strokeDash=[4, 4], color="gray").encode(y="ideal:Q")
    one = alt.Chart().mark_rule(color="black", opacity=0.4).encode(y=alt.datum(1))
    points = base.mark_line(point=alt.OverlayMarkDef(size=70, filled=True)).encode(
        y=alt.Y("speedup:Q", title="speedup over γ=0"),
        color=alt.Color("workload:N", scale=WORKLOAD_COLORS),
        shape=_shape(cells), detail="sku_label:N",
        tooltip=["workload", "sku_label", "batch", "gamma", alt.Tooltip("speedup", format=".2f"),
                 alt.Tooltip("alpha", title="counter α", format=".2f")])
    return alt.layer(ideal, one, points, data=data).properties(width=WIDTH, height=220).facet(
        column=alt.Column("batch:N", title="batch")).properties(
        title="Speedup tracks acceptance, not γ (dashed: γ+1)").configure_legend(
        orient="right", labelLimit=0)


def fig2_latency(cells: pd.DataFrame) -> alt.FacetChart:
    """Figure 2: measured per-token latency (points) against eq. 1 (curves)."""
    cells = regime_cells(cells)
    cols = ["sku_label", "workload", "batch", "gamma", "pot_ms"]
    data = pd.concat([
        eq1_curves(cells)[cols].assign(kind="eq. 1"),
        cells[cols + ["pred_eq1_ms", "alpha"]].assign(kind="measured")], ignore_index=True)
    base = alt.Chart().encode(
        x=alt.X("gamma:Q", title="γ"), y=alt.Y("pot_ms:Q", title="per-output-token latency (ms)"),
        color=alt.Color("workload:N", scale=WORKLOAD_COLORS))
    line = base.transform_filter(alt.datum.kind == "eq. 1").mark_line().encode(
        detail="sku_label:N", strokeDash=alt.StrokeDash("sku_label:N", legend=None))
    pts = base.transform_filter(alt.datum.kind == "measured").mark_point(
        size=80, filled=True).encode(
        shape=_shape(cells),
        tooltip=["workload", "sku_label", "batch", "gamma",
                 alt.Tooltip("pot_ms", format=".1f"), alt.Tooltip("pred_eq1_ms", format=".1f"),
                 alt.Tooltip("alpha", format=".2f")])
    return alt.layer(line, pts, data=data).properties(width=WIDTH, height=220).facet(
        column=alt.Column("batch:N", title="batch")).properties(
        title="One equation, both regimes: points measured, curves eq. 1 with counter α"
    ).configure_legend(orient="right", labelLimit=0)


def fig3_shortfall(cells: pd.DataFrame, workload: str = "repeat") -> alt.Chart:
    """Figure 3: ideal αγ+1 versus measured speedup; the gap split into d(γ) and the residual
    (:func:`specbench.report.curves.shortfall_split`)."""
    parts = shortfall_split(cells, workload)
    bars = alt.Chart(parts).mark_bar().encode(
        x=alt.X("gamma:O", title="γ"), y=alt.Y("sum(value):Q", title="speedup (stacked to αγ+1)"),
        color=alt.Color("part:N", title="", scale=alt.Scale(
            range=["#1f77b4", "#999999", "#ff7f0e"])),
        order=alt.Order("part:N"),
        tooltip=["sku_label", "batch", "gamma", "part", alt.Tooltip("value", format=".3f")])
    return bars.properties(width=150, height=220).facet(
        column=alt.Column("batch:N", title="batch"), row=alt.Row("sku_label:N", title=None)
    ).properties(title=f"'{workload}': where the ideal αγ+1 goes").configure_legend(
        orient="right", labelLimit=0)


def fig4_host_floor(steps: pd.DataFrame) -> alt.Chart:
    """Figure 4: per-step compute versus host-exposed time, by model size."""
    long = steps.melt(id_vars=["model_label"], value_vars=["compute_ms", "host_ms"],
                      var_name="part", value_name="ms")
    long["part"] = long["part"].map({"compute_ms": "compute", "host_ms": "host-exposed"})
    return alt.Chart(long).mark_bar().encode(
        x=alt.X("model_label:N", title=None, axis=alt.Axis(labelAngle=0, labelLimit=260)),
        y=alt.Y("ms:Q", title="ms per decode step"),
        color=alt.Color("part:N", title="", scale=alt.Scale(range=["#1f77b4", "#ff7f0e"])),
        order=alt.Order("part:N"), tooltip=["model_label", "part", alt.Tooltip("ms", format=".2f")]
    ).properties(width=420, height=240, title="Decode step = compute + host-exposed time")


def fig5_timing_alpha(cells: pd.DataFrame) -> alt.Chart:
    """Figure 5: timing-derived α (eq. 1 inverted) per SKU, beside the counter α."""
    cells = regime_cells(cells)
    c = cells[cells["gamma"] > 0]
    long = pd.concat([c.assign(source="timing-derived", value=c["alpha_timing"]),
                      c.assign(source="counter", value=c["alpha"])])
    return alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("gamma:Q", title="γ", axis=alt.Axis(tickMinStep=1)),
        y=alt.Y("value:Q", title="acceptance α"),
        color=alt.Color("workload:N", scale=WORKLOAD_COLORS),
        strokeDash=alt.StrokeDash("source:N", title="α from"),
        shape=_shape(c), detail="sku_label:N",
        tooltip=["workload", "sku_label", "batch", "gamma", "source",
                 alt.Tooltip("value", format=".3f")]
    ).properties(width=WIDTH, height=220).facet(column=alt.Column("batch:N", title="batch")
    ).properties(title="Timing-derived α absorbs per-cycle overhead; the counter does not"
    ).configure_legend(orient="right", labelLimit=0)


def fig6_parity(cells: pd.DataFrame) -> alt.Chart:
    """Figure 6: eq. 1 (counter α) versus measured per-token latency, log-log."""
    cells = regime_cells(cells)
    c = cells[cells["gamma"] > 0]
    lo, hi = 0.8 * min(c["pot_ms"].min(), c["pred_eq1_ms"].min()), 1.25 * max(
        c["pot_ms"].max(), c["pred_eq1_ms"].max())
    diag = alt.Chart(pd.DataFrame({"x": [lo, hi]})).mark_line(color="gray", strokeDash=[4, 4]
                                                               ).encode(x="x:Q", y="x:Q")
    scale = alt.Scale(type="log", domain=[lo, hi])
    pts = alt.Chart(c).mark_point(size=80, filled=True).encode(
        x=alt.X("pot_ms:Q", title="measured per-token latency (ms)", scale=scale),
        y=alt.Y("pred_eq1_ms:Q", title="eq. 1 prediction (ms)", scale=scale),
        color=alt.Color("workload:N", scale=WORKLOAD_COLORS), shape=_shape(c),
        tooltip=["workload", "sku_label", "batch", "gamma", alt.Tooltip("pot_ms", format=".2f"),
                 alt.Tooltip("pred_eq1_ms", format=".2f"),
                 alt.Tooltip("err_eq1_pct", format="+.1f")])
    return (diag + pts).properties(width=320, height=320,
                                   title="Model versus measurement, every speculative cell")


_ECONOMICS_ALPHAS = np.linspace(0, 0.99, 100)


def fig_economics(alphas=_ECONOMICS_ALPHAS, k: int = 4, c: float = 0.05,
                  vs=(0.0, 0.1, 0.25, 0.5)) -> alt.Chart:
    """Net speedup versus per-position α for several verification overheads v."""
    from specbench.theory.economics import net_speedup
    data = pd.concat([pd.DataFrame({"alpha": alphas, "v": f"v={v}",
                                    "speedup": net_speedup(alphas, k, c, v)}) for v in vs])
    line = alt.Chart(data).mark_line().encode(
        x=alt.X("alpha:Q", title="per-position acceptance α"),
        y=alt.Y("speedup:Q", title=f"net speedup (k={k}, c={c})"), color=alt.Color("v:N", title=""))
    one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="black").encode(y="y:Q")
    return (line + one).properties(width=340, height=240,
                                   title="Break-even moves right as verification costs more")


_LIMITS_ALPHAS = np.linspace(0, 1, 51)


def fig_model_limits(d: float = 0.02, gammas=(2, 4, 6), alphas=_LIMITS_ALPHAS) -> alt.Chart:
    """Eq. 1's speedup against α at a few γ, beside the acceptance-blind γ+1 (no data)."""
    curves = pd.concat([
        pd.DataFrame({"α": alphas, "γ": f"γ={g}", "speedup": model.speedup(alphas, g, d),
                      "model": f"eq. 1 (d = {d:g})"}) for g in gammas] + [
        pd.DataFrame({"α": alphas, "γ": f"γ={g}", "speedup": g + 1.0,
                      "model": "acceptance-blind"}) for g in gammas])
    return alt.Chart(curves).mark_line().encode(
        x=alt.X("α:Q", title="acceptance α"), y=alt.Y("speedup:Q", title="predicted speedup"),
        color="γ:N", strokeDash=alt.StrokeDash("model:N", title="")
    ).properties(width=360, height=240,
                 title="Eq. 1 falls to 1/(1+d) as α → 0; the blind model stays at γ+1")


def speedup_vs_alpha(cells: pd.DataFrame) -> alt.LayerChart:
    """Measured paired speedup against counter α over every greedy speculative cell, with the
    closed form αγ+1 per γ (every step drafting, d = 0)."""
    from specbench.report.acceptance import display_workload, speedup_curves
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)].assign(
        workload=lambda c: c["workload"].map(display_workload),
        drafting=lambda c: c["drafting_share"].round(2))
    curves = speedup_curves(sorted(spec["gamma"].unique()))
    lines = alt.Chart(curves).mark_line(strokeDash=[4, 3], color="gray").encode(
        x="alpha:Q", y="speedup:Q", detail="gamma:N")
    points = alt.Chart(spec).mark_point(filled=True, size=70).encode(
        x=alt.X("alpha:Q", title="counter α (accepted / drafted)",
                scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("speedup:Q", title="measured speedup (paired γ=0 / γ)"),
        color=alt.Color("workload:N", title="workload"),
        shape=alt.Shape("batch:N", title="batch"),
        size=alt.Size("drafting:Q", title="drafting share", scale=alt.Scale(range=[30, 200])),
        tooltip=["sku_label", "workload", "batch", "gamma", alt.Tooltip("alpha", format=".2f"),
                 alt.Tooltip("drafting_share", format=".2f"),
                 alt.Tooltip("speedup", format=".2f")])
    return alt.layer(lines, points).properties(
        width=420, height=320, title="Speedup against acceptance: dashed lines αγ+1 per γ"
    ).configure_legend(labelLimit=0)


def parity(cells: pd.DataFrame, column: str = "model_pot_ms",
           label: str = "headline model") -> alt.LayerChart:
    """Predicted against measured per-token latency over every evaluated cell (log axes)."""
    from specbench.report.acceptance import display_workload
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)].assign(
        workload=lambda c: c["workload"].map(display_workload))
    both = spec[["pot_ms", column]]
    lo, hi = float(both.min().min()), float(both.max().max())
    diagonal = alt.Chart(pd.DataFrame({"x": [lo, hi]})).mark_line(color="gray").encode(
        x="x:Q", y="x:Q")
    points = alt.Chart(spec).mark_point(filled=True, size=60).encode(
        x=alt.X("pot_ms:Q", title="measured per-token latency (ms)", scale=alt.Scale(type="log")),
        y=alt.Y(f"{column}:Q", title=f"{label} (ms)", scale=alt.Scale(type="log")),
        color=alt.Color("workload:N"), shape=alt.Shape("sku_label:N", title="SKU"),
        tooltip=["sku_label", "workload", "batch", "gamma", alt.Tooltip("pot_ms", format=".2f"),
                 alt.Tooltip(column, format=".2f")])
    return alt.layer(diagonal, points).properties(
        width=400, height=340, title=f"Parity: {label} against measurement, every cell"
    ).configure_legend(labelLimit=0)


def sealed_parity(judged: pd.DataFrame) -> alt.FacetChart:
    """Sealed predictions (model and ratio transfer, made before the sweep) against what the
    sweep then measured, one panel per predictor (log axes, the diagonal is a perfect guess)."""
    from specbench.report.acceptance import display_workload
    long = pd.concat([judged.assign(predictor=name, predicted_ms=judged[col])
                      for name, col in (("headline model", "model_pot_ms"),
                                        ("ratio transfer", "ratio_pot_ms"))], ignore_index=True)
    long["workload"] = long["workload"].map(display_workload)
    lo = 0.9 * float(long[["pot_ms", "predicted_ms"]].min().min())
    hi = 1.1 * float(long[["pot_ms", "predicted_ms"]].max().max())
    scale = alt.Scale(type="log", domain=[lo, hi])
    diagonal = alt.Chart(pd.DataFrame({"x": [lo, hi]})).mark_line(
        color="gray", strokeDash=[4, 4]).encode(x="x:Q", y="x:Q")
    points = alt.Chart().mark_point(filled=True, size=60).encode(
        x=alt.X("pot_ms:Q", title="measured after sealing (ms/token)", scale=scale),
        y=alt.Y("predicted_ms:Q", title="sealed prediction (ms/token)", scale=scale),
        color=alt.Color("workload:N"), shape=alt.Shape("batch:N", title="batch"),
        tooltip=["sku", "workload", "batch", "gamma", alt.Tooltip("pot_ms", format=".2f"),
                 alt.Tooltip("predicted_ms", format=".2f")])
    return alt.layer(diagonal, points, data=long).properties(width=230, height=230).facet(
        column=alt.Column("predictor:N", title=None)).properties(
        title="Predicted before measured: below the diagonal, the SKU ran slower than sealed"
    ).configure_legend(labelLimit=0)


def fig_break_even(table: pd.DataFrame) -> alt.FacetChart:
    """Per-position acceptance of each measured workload against the break-even α at the
    engine's verification overhead v(γ), per SKU and batch (``plan.break_even_table``; its
    ``sku`` column, or a readable ``SKU`` one).

    At most a handful of series stay distinguishable: the break-even lines are one grey line
    per SKU (the tooltip names it), and Spec-Bench's categories share one colour."""
    sku = "SKU" if "SKU" in table else "sku"
    data = table[[sku, "batch", "workload", "gamma", "v", "break_even_alpha",
                  "alpha_per_position", "aggregate_r", "measured_speedup"]].rename(
        columns={sku: "sku_label"})
    data = data.assign(kind=data["workload"].map(_workload_group))
    base = alt.Chart().encode(x=alt.X("gamma:Q", title="γ (draft tokens per step)",
                                      axis=alt.Axis(tickMinStep=1)))
    line = base.mark_line(color="gray", opacity=0.5, strokeDash=[4, 3]).encode(
        y=alt.Y("break_even_alpha:Q", title="per-position acceptance α",
                scale=alt.Scale(domain=[0, 1])),
        detail="sku_label:N", tooltip=["sku_label", "batch", "gamma",
                                       alt.Tooltip("break_even_alpha", format=".3f")])
    points = base.mark_point(size=60, filled=True, opacity=0.7).encode(
        y="alpha_per_position:Q", color=alt.Color("kind:N", title="workload"),
        tooltip=["sku_label", "workload", "batch", "gamma",
                 alt.Tooltip("v", format=".3f"), alt.Tooltip("break_even_alpha", format=".3f"),
                 alt.Tooltip("alpha_per_position", title="per-position α", format=".3f"),
                 alt.Tooltip("aggregate_r", title="accepted/proposed", format=".3f"),
                 alt.Tooltip("measured_speedup", format=".2f")])
    return alt.layer(line, points, data=data).properties(width=WIDTH, height=220).facet(
        column=alt.Column("batch:N", title="batch")).properties(
        title="Measured acceptance against the break-even at the model's verify overhead")


def _workload_group(workload: str) -> str:
    """A colour group: this project's own workloads by name, Spec-Bench's categories as one."""
    return "Spec-Bench categories" if workload.startswith("specbench:") else workload


# -- serving under load (book/serving.md; data from specbench.measure.serving runs) -----------

_GAMMA_PALETTE = {0: "#444444", 2: "#1f77b4", 4: "#ff7f0e", 6: "#2ca02c"}
GAMMA_COLORS = alt.Scale(domain=list(_GAMMA_PALETTE), range=list(_GAMMA_PALETTE.values()))


def _gamma_colors(gammas) -> alt.Scale:
    """γ colours for the levels measured only (a legend lists no γ that was never run)."""
    gammas = sorted({int(g) for g in gammas})
    return alt.Scale(domain=gammas, range=[_GAMMA_PALETTE.get(g, "#9467bd") for g in gammas])
_CONCURRENCY = alt.X("concurrency:Q", title="concurrency (requests in flight)",
                     scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=[1, 2, 4, 8, 16]))


def fig_serving_percentiles(levels: pd.DataFrame, metrics=("itl", "ttft"),
                            percentiles=(50, 95)) -> alt.FacetChart:
    """Latency percentiles against concurrency, per workload and metric (panels), one line per
    γ and percentile, from a serving run's ``levels.csv`` (closed loop). Two percentiles by
    default, so three γ stay six distinguishable lines; p99 is in ``levels.csv``."""
    closed = levels[levels["mode"] == "concurrency"]
    rows = []
    for metric in metrics:
        for p in percentiles:
            rows.append(closed[["workload", "gamma", "concurrency"]].assign(
                metric=metric.upper(), percentile=f"p{p}", ms=closed[f"p{p}_{metric}_ms"]))
    data = pd.concat(rows, ignore_index=True)
    data["panel"] = data["workload"] + " · " + data["metric"]
    # Lines only: the percentile legend then shows the dash patterns it encodes.
    return alt.Chart(data).mark_line().encode(
        x=_CONCURRENCY, y=alt.Y("ms:Q", title="ms", scale=alt.Scale(type="log")),
        color=alt.Color("gamma:O", title="γ", scale=_gamma_colors(data["gamma"])),
        strokeDash=alt.StrokeDash("percentile:N", title="percentile",
                                  sort=[f"p{p}" for p in percentiles],
                                  legend=alt.Legend(symbolType="stroke")),
        detail="percentile:N",
        tooltip=["workload", "gamma", "concurrency", "metric", "percentile",
                 alt.Tooltip("ms", format=".1f")]
    ).properties(width=130, height=130).facet(
        facet=alt.Facet("panel:N", title=None), columns=3
    ).resolve_scale(y="independent").properties(
        title="Latency percentiles under load (client-side, vLLM's benchmark client)")


def fig_serving_goodput(levels: pd.DataFrame) -> alt.FacetChart:
    """Output tokens per second of SLO-meeting requests against concurrency, per workload,
    one line per γ; the total output throughput dashed."""
    closed = levels[levels["mode"] == "concurrency"]
    data = pd.concat([
        closed.assign(kind="SLO-qualified", tokens=closed["qualified_tokens_per_s"]),
        closed.assign(kind="all requests", tokens=closed["output_throughput"])],
        ignore_index=True)[["workload", "gamma", "concurrency", "kind", "tokens", "goodput",
                            "cost_per_million_usd"]]
    return alt.Chart(data).mark_line(point=True).encode(
        x=_CONCURRENCY, y=alt.Y("tokens:Q", title="output tokens/s"),
        color=alt.Color("gamma:O", title="γ", scale=_gamma_colors(levels["gamma"])),
        strokeDash=alt.StrokeDash("kind:N", title="", sort=["SLO-qualified", "all requests"],
                                  legend=alt.Legend(symbolType="stroke")),
        detail="kind:N",
        tooltip=["workload", "gamma", "concurrency", "kind", alt.Tooltip("tokens", format=".1f"),
                 alt.Tooltip("goodput", title="goodput (req/s)", format=".2f"),
                 alt.Tooltip("cost_per_million_usd", title="USD / M qualified", format=".2f")]
    ).properties(width=150, height=150).facet(facet=alt.Facet("workload:N", title=None),
                                              columns=3
    ).properties(title="Goodput: output tokens/s of requests that met the SLO")


def fig_serving_speedup(speedup: pd.DataFrame) -> alt.FacetChart:
    """Speculation's speedup (median TPOT of γ=0 over γ) against concurrency, with its 95 %
    bootstrap interval, per workload; the line at 1 is break-even."""
    data = speedup[["workload", "gamma", "concurrency", "speedup", "speedup_lo", "speedup_hi"]]
    base = alt.Chart().encode(x=_CONCURRENCY, color=alt.Color(
        "gamma:O", title="γ", scale=_gamma_colors(data["gamma"])))
    band = base.mark_errorbar(ticks=True).encode(
        y=alt.Y("speedup_lo:Q", title="speedup over γ=0 (median TPOT)",
                scale=alt.Scale(type="log")), y2="speedup_hi:Q")
    line = base.mark_line(point=True).encode(
        y="speedup:Q", tooltip=["workload", "gamma", "concurrency",
                                alt.Tooltip("speedup", format=".2f"),
                                alt.Tooltip("speedup_lo", format=".2f"),
                                alt.Tooltip("speedup_hi", format=".2f")])
    one = alt.Chart().mark_rule(color="black", opacity=0.5).encode(y=alt.datum(1))
    return alt.layer(band, line, one, data=data).properties(width=150, height=150).facet(
        facet=alt.Facet("workload:N", title=None), columns=3).properties(
        title="Does speculation still pay under load? (bars: 95 % bootstrap interval)")
