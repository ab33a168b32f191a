"""Analysis and charts on the committed runs (real data, no engine)."""

import numpy as np
import pandas as pd
import pytest

from specbench.derive import analysis

from specbench.report import charts
from specbench.report.numbers import first_sku
from specbench.store.runs import load_runs


@pytest.fixture(scope="module")
def cells(analysed_store):
    return analysed_store


@pytest.mark.data
def test_committed_sweep_meets_the_design(cells):
    """The committed reference run: 'repeat' copies, 'open' does not, speculation pays."""
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)]
    rep, opn = spec[spec["workload"] == "repeat"], spec[spec["workload"] == "open"]
    assert (rep[rep["batch"] == 1]["alpha"] >= 0.9).all()
    assert (rep[rep["batch"] == 4]["alpha"] >= 0.8).all()
    assert (opn["alpha"] <= 0.3).all()
    top = rep[(rep["batch"] == 1) & (rep["gamma"] == rep["gamma"].max())]
    assert (top["speedup"] >= 2).all()


@pytest.mark.data
def test_predictions_are_finite_and_independent_of_the_cell_latency(cells):
    spec = cells[(cells["gamma"] > 0) & (cells["temperature"] == 0)]
    for column in ("t_base_ms", "d", "pred_eq1_ms", "pred_blind_ms", "err_eq1_pct"):
        assert np.isfinite(spec[column]).all(), column
    # eq. 1 sees only t_base, counter α and d: recomputing it without pot_ms gives the same.
    again = spec["t_base_ms"] * (1 + spec["d_roofline"]) / (spec["alpha"] * spec["gamma"] + 1)
    assert np.allclose(again, spec["pred_eq1_ms"])
    # Verifying more rows never costs less, but a microbenchmark measures that growth within
    # its noise: on the Intel Xeon (AMX, bfloat16) γ=2 at batch 1 measured −0.9 % of a step.
    # The model takes the measurement as it is; a d further below zero would be a broken
    # microbenchmark, not noise.
    assert (spec["d"] >= -0.02).all()
    # Batch 1 is memory-bound in the roofline of every SKU but the Zen 1 in float32, whose
    # measured ceilings (37 GFLOP/s against 20 GB/s) put 5 and 7 rows past the ridge point;
    # its kernel microbenchmark agrees that verification is not nearly free there (d = 0.73 at
    # γ=6 against at most 0.29 elsewhere; the story chapter says so).
    b1 = spec[spec["batch"] == 1]
    assert set(b1[b1["d_roofline"] >= 0.5]["sku"]) <= {"cpu-amd-epyc-f23m1-1t-float32"}


@pytest.mark.data
def test_blind_model_fails_on_open_more_than_eq1(cells):
    """The claim the prose makes (Table 1's sentence): on the SKU it quotes, the blind model
    errs more on 'open' than eq. 1. It is not true on every SKU — on the Zen 3 in float32
    eq. 1's roofline d over-charges 'open' (85 % against the blind model's 78 %) — so on every
    SKU only the blind model's own failure is asserted (it predicts a speedup that never comes);
    the chapter names the exception (``open_over_skus``, tested below)."""
    table = analysis.accuracy_table(cells)
    quoted = first_sku(cells)["sku_label"].iloc[0]
    row = table.loc[(quoted, "all", "open")]
    assert row["acceptance-blind MAPE %"] > row["eq. 1 MAPE %"]
    for sku in cells["sku_label"].unique():
        assert table.loc[(sku, "all", "open")]["acceptance-blind MAPE %"] > 50


@pytest.mark.data
def test_every_chart_builds_to_a_vega_lite_spec(cells):
    for build in (charts.fig1_headline, charts.fig1_speedup, charts.fig2_latency,
                  charts.fig3_shortfall, charts.fig5_timing_alpha, charts.fig6_parity):
        spec = build(cells).to_dict()
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    assert charts.fig_economics().to_dict()


@pytest.mark.data
def test_offline_renderer_is_deterministic_and_cdn_free(cells):
    spec = charts.fig6_parity(cells).to_dict()
    a, b = charts._render(spec, png=False), charts._render(spec, png=False)
    assert a == b and "vegaEmbed(" in a["text/html"]
    assert "cdn." not in a["text/html"] and "jsdelivr" not in a["text/html"]


@pytest.mark.data
def test_manifest_table_lists_every_run():
    runs = load_runs()
    table = analysis.manifest_table(runs)
    assert len(table) == len(runs)
    assert table["engine"].str.match(r"(vllm|transformers)").all()
    hf = table["SKU"].str.endswith("-hf")
    assert table.loc[hf, "engine"].str.startswith("transformers").all()


def _open_table(rows):
    cells = pd.DataFrame(rows, columns=["sku_label", "batch", "gamma", "workload",
                                        "err_eq1_pct", "err_blind_pct"]).assign(alpha=0.0)
    return analysis.accuracy_table(cells)


def test_the_open_sentence_names_each_sku_where_eq1_loses_and_why_only_when_shown():
    from specbench.report.chapters.accuracy import open_over_skus
    a = [("A", 1, 2, "open", 5, -60), ("A", 4, 2, "open", 10, -70)]
    assert open_over_skus(_open_table(a)).endswith("on 1 of 1, and with batch 4 included on "
                                                  "every one")
    # B: eq. 1 wins at batch 1 but over-predicts batch 4 by 250 % -> named, with the reason.
    b = a + [("B", 1, 2, "open", 10, -60), ("B", 4, 2, "open", 250, -70),
             ("B", 1, 4, "open", -2, -80), ("A", 1, 4, "repeat", 300, 0)]
    text = open_over_skus(_open_table(b))
    assert "at batch 1 on 2 of 2" in text and "on 1 of them, against the paper's claim: B (" in text
    assert "over-predicts every cell, by up to 250 percent" in text and "A (" not in text
    # C: loses at batch 1 too -> named, but no roofline reason is claimed.
    c = a + [("C", 1, 2, "open", 90, -60), ("C", 4, 2, "open", 90, -70)]
    text = open_over_skus(_open_table(c))
    assert "at batch 1 on 1 of 2" in text and "C (eq. 1 90.0 percent, the blind model 65.0)" in text


@pytest.mark.parametrize("family, model, generation", [
    (23, 1, "Zen 1"), (23, 8, "Zen+"), (23, 0x31, "Zen 2"), (25, 1, "Zen 3"),
    (25, 17, "Zen 4"), (26, 2, "Zen 5"), (23, None, "Zen 1/2"), (6, 85, "family 6 model 85"),
    (6, None, "family 6")])
def test_amd_generation_from_family_and_model(family, model, generation):
    assert analysis._amd_generation(family, model) == generation


class _LabelRun:
    def __init__(self, hardware, dtype="bfloat16", engine="vllm"):
        self.manifest = {"hardware": hardware, "dtype": dtype, "engine": {"name": engine},
                         "model_shape": None, "roofline_sku": None}


@pytest.mark.parametrize("hardware, dtype, engine, label", [
    ({"cpu_family": 25, "cpu_model_number": 17, "threads": 1}, "bfloat16", "vllm",
     "Zen 4 · bf16 · 1 thread"),
    ({"cpu_family": 25, "cpu_model_number": 17, "threads": 2}, "bfloat16", "vllm",
     "Zen 4 · bf16 · 2 threads"),
    ({"cpu_family": 25, "cpu_model_number": 1, "threads": 1}, "float32", "transformers",
     "Zen 3 · fp32 · 1 thread · transformers"),
    # The first runs recorded no CPU family: their own SKU, named as the first Zen 4 host.
    ({"threads": 1}, "float32", "vllm", "Zen 4 · fp32 · 1 thread · first host"),
])
def test_sku_labels_read_as_words(monkeypatch, hardware, dtype, engine, label):
    monkeypatch.setattr(analysis, "roofline_of", lambda run: "measured")
    assert analysis.sku_label(_LabelRun(hardware, dtype, engine)) == label
