"""`make book`'s sweep runs with vLLM's prefix cache, filled by each unit's untimed warmup, so
that no timed call pays its prompt's prefill (specbench.measure.sweep_config).

Two real-format fixtures, measured on a 2-core Zen 4 (cpu family 25, model 17) one after the
other, nothing else running:

* ``store_prefix_cache_ab``: the same small sweep ('repeat' and 'edit', batches 1 and 4,
  γ 0/2/4/6, one prompt per batch-1 cell, 64 tokens, 3 repetitions) without the cache, with it,
  and without it again (`specbench sweep --workloads repeat,edit --batches 1,4 --prompts 1
  --max-tokens 64 --reps 3 [--prefix-caching]`). The cache must change neither the tokens nor
  the counters, and must move the per-token latency no more than two runs without it differ.
* ``store_make_book_zen4_noisy``: `make book`'s own measurement (sweep and kernel
  microbenchmark) on that host, the day its repetitions spread 14 % in the median cell (2-54 %;
  2.7 % on the same kind of machine the day before, ``store_make_book_zen4``).
* ``store_make_book_zen5_noisy``: `make book` on a 2-core Zen 5 (cpu family 26, model 2)
  later that day, right after a quiet-machine Spec-Bench sweep there: its
  calls' repetitions vary by 11.7 % (median coefficient of variation; 1.9 % in that kind's
  sweep of 30 November), again with no foreign CPU time.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specbench.derive import analysis
from specbench.derive.evaluation import evidence
from specbench.store.runs import load_runs
from specbench.theory.predict import HEADLINE

FIXTURES = Path(__file__).parent / "fixtures"
KEY = ["workload", "batch", "gamma"]


@pytest.fixture(scope="module")
def ab():
    """The three runs in the order measured: uncached, cached, uncached."""
    runs = load_runs(FIXTURES / "store_prefix_cache_ab", kind="sweep")
    cached = [r.manifest["engine"]["settings"]["enable_prefix_caching"] for r in runs]
    assert cached == [False, True, False]
    return runs


def test_the_cache_changes_no_token_and_no_counter(ab):
    key = KEY + ["arm", "rep", "request"]
    first, cached, last = (r.table("requests.csv").set_index(key).sort_index() for r in ab)
    for other in (cached, last):
        assert (first["output_sha256"] == other["output_sha256"]).all()
        for counter in ("drafts", "accepted_tokens"):
            assert first[counter].fillna(-1).equals(other[counter].fillna(-1))


def test_the_cache_moves_latency_no_more_than_a_rerun_does(ab):
    first, cached, last = (r.table("cells.csv").set_index(KEY)["pot_ms"] for r in ab)
    uncached = (first + last) / 2
    rerun = np.log(last / first).abs()
    change = np.log(cached / uncached).abs()
    assert change.mean() <= rerun.mean()
    assert 0.9 <= float((cached / uncached).median()) <= 1.1


def test_cached_calls_skip_the_prefill_and_the_book_blanks_their_ttft(ab):
    first, cached, _ = (r.table("cells.csv").set_index(KEY)["ttft_ms"] for r in ab)
    assert (cached < 0.5 * first).all()         # the warmup cached every prompt
    cached_run = analysis.sweep_cells(FIXTURES / "store_make_book_zen4_noisy")
    assert cached_run["prefix_cached"].all() and cached_run["ttft_ms"].isna().all()
    prefill_run = analysis.sweep_cells(FIXTURES / "store_make_book_zen4")
    assert not prefill_run["prefix_cached"].any() and prefill_run["ttft_ms"].notna().all()


@pytest.fixture(scope="module", params=["zen4_noisy", "zen5_noisy"])
def noisy(request):
    return evidence(analysis.sweep_cells(FIXTURES / f"store_make_book_{request.param}"))


def test_the_noisy_host_is_visible_in_the_run(noisy):
    spread = noisy.groupby("batch")["rep_spread_pct"].median()
    assert (spread > 10).all()                  # 1-5 % on a quiet host
    # … and the book labels the SKU a noisy host (specbench.derive.noise.repetition_cv_pct).
    assert noisy["noisy_host"].all()


@pytest.mark.xfail(strict=True, reason="against the issue's requirement, kept visible: on a "
                   "noisy host make book's own measurement gives the headline model 21 % (Zen "
                   "4) and 20 % (Zen 5) at batch 1 where eq. 1 errs 14 % and 16 % "
                   "(test_make_book_store: 3.4 % vs 9.3 % on a quiet one); the book names such "
                   "a SKU a noisy host")
def test_headline_is_no_worse_than_eq1_at_batch_1_on_the_noisy_host(noisy):
    at = noisy[noisy["batch"] == 1]
    assert at[f"err_{HEADLINE}_pct"].abs().mean() <= at["err_eq1_pct"].abs().mean()


def test_at_batch_4_the_headline_still_beats_eq1_on_the_noisy_host(noisy):
    at = noisy[noisy["batch"] == 4]
    assert at[f"err_{HEADLINE}_pct"].abs().mean() < at["err_eq1_pct"].abs().mean()
