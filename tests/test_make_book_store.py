"""A SKU measured only by `make book` (issue: batch-N measured right).

The fixture is the store `make book` wrote on a 2-core Zen 4 (cpu family 25, model 17) into an
empty-of-that-measurement scratch store: its γ-sweep of 'repeat', 'open' and 'edit' (one prompt
per batch-1 cell, 64 tokens, 3 repetitions, decode windows at batch 4) and its kernel
microbenchmark, copied unchanged (the sweep's notebook and parts left out). On this evidence
alone the headline model must not do worse than the paper's eq. 1 — the failure the issue
reports for the earlier default measurement ('repeat' and 'open' only, h fitted on a drafting
share of 0.07: 24 % against eq. 1's 5 %).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from specbench.derive import analysis
from specbench.derive.evaluation import evidence, quick_sweep_skus, quick_sweep_summary
from specbench.theory.predict import HEADLINE, MIN_IDENTIFYING_SHARE


@pytest.fixture(scope="module")
def cells():
    store = Path(__file__).parent / "fixtures" / "store_make_book_zen4"
    return evidence(analysis.sweep_cells(store))


def test_the_store_is_one_sku_measured_by_make_book(cells):
    assert set(cells["sku"]) == {"cpu-amd-epyc-f25m17-1t-bfloat16"}
    assert set(cells["workload"]) == {"repeat", "open", "edit"}
    assert set(cells["batch"]) == {1, 4}
    # 'edit' drafts on most of its steps, so h is identified without 'open'.
    edit = cells[cells["workload"] == "edit"]
    assert edit["drafting_share"].between(MIN_IDENTIFYING_SHARE, 1.0).all()


@pytest.mark.parametrize("batch", [1, 4])
def test_headline_model_is_no_worse_than_eq1(cells, batch):
    at = cells[cells["batch"] == batch]
    model = at[f"err_{HEADLINE}_pct"].abs().mean()
    eq1 = at["err_eq1_pct"].abs().mean()
    assert model <= eq1, f"batch {batch}: headline {model:.1f} % vs eq. 1 {eq1:.1f} %"


def test_d_comes_from_the_microbenchmark(cells):
    # The kernel microbenchmark beside the sweep gives d; the roofline is not the source.
    assert set(cells["d_micro_run"]) == {"microbench-20261201T053040-281298"}
    assert cells["d"].notna().all() and (cells["d"] > 0).all()


FIXTURES = Path(__file__).parent / "fixtures"


def test_the_quick_sweep_sku_is_recognised_and_judged():
    raw = analysis.sweep_cells(FIXTURES / "store_make_book_zen4")
    assert quick_sweep_skus(raw) == ["cpu-amd-epyc-f25m17-1t-bfloat16"]
    n = quick_sweep_summary(raw)
    assert n["quick_skus"] == 1 and n["quick_worse"] == 0
    assert n["quick_sentence"].endswith("does no worse than eq. 1 there at any batch")


def test_a_quick_sweep_sku_where_the_headline_loses_is_named():
    # The noisy Zen 4: headline 21 % against eq. 1's 14 % at batch 1 (test_prefix_cache).
    n = quick_sweep_summary(analysis.sweep_cells(FIXTURES / "store_make_book_zen4_noisy"))
    assert n["quick_worse"] == 1
    assert n["quick_sentence"].endswith("does worse than eq. 1 on Zen 4 · bf16 · 1 thread "
                                        "at batch 1")


def test_a_spec_bench_sweep_is_not_a_quick_one():
    raw = analysis.sweep_cells(FIXTURES / "store_make_book_zen4")
    raw["run_prompts"] = 8
    assert quick_sweep_skus(raw) == []
    assert quick_sweep_summary(raw)["quick_skus"] == 0


@pytest.mark.data
def test_the_headline_is_no_worse_than_eq1_on_every_committed_quick_sweep_sku(analysed_store):
    # The requirement on the committed store (the Zen 1 in float32 is measured by
    # `make book` alone), per SKU and batch.
    raw = analysed_store
    assert quick_sweep_skus(raw), "no SKU of the committed store is measured by make book alone"
    n = quick_sweep_summary(raw)
    assert n["quick_worse"] == 0, n["quick_sentence"]
