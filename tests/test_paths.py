"""How far a number travels from the page to its runs: the project functions between a chapter's
numbers function and each file it reads, counted by a profiler (``sys.setprofile``) on a cold
cache over the committed store, and drawn as two paths in docs/architecture.md.

A path is the chain of this package's frames from the traced function down to the call of
``open`` that reads a run's file. ``store.cache``'s frames are left out of the count: they are
the memoising decorator around a function, not a stop of the path (a warm cache ends the path
there). Along a path the layer never rises again: a call from the store back into the report
would be a climb back."""
from __future__ import annotations

import builtins
import io
import sys
from collections import Counter

import pytest

pytestmark = pytest.mark.data

DECORATOR = "specbench.store.cache"
RANK = {"cli": 5, "report": 4, "measure": 4, "derive": 3, "store": 2, "engine": 2, "theory": 1}
HEADLINE_MAX = 8      # issue 44: the headline MAPE through at most 8 functions
FLOOR_MAX = 10        # and the host-floor chapter's numbers through at most 10
# What ``summary.summary`` calls to compute the headline MAPE: the cells, the per-request
# predictors, leave-one-SKU-out and the headline itself.
HEADLINE_INPUTS = {"greedy_cells", "request_predictors", "leave_one_sku_out", "headline"}


def _chain(frame, top) -> tuple[tuple[str, str], ...]:
    """This package's frames from ``top`` (a code object) down to ``frame``, outermost first."""
    chain = []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("specbench.") and not module.startswith(DECORATOR):
            chain.append((module, frame.f_code.co_qualname))
        if frame.f_code is top:
            break
        frame = frame.f_back
    return tuple(dict.fromkeys(reversed(chain)))


def read_paths(func, *args) -> Counter:
    """Every distinct chain that ended in a file read while ``func(*args)`` ran, with its count."""
    paths: Counter = Counter()
    top = func.__code__

    def profile(frame, event, arg):
        if event == "c_call" and arg in (builtins.open, io.open):
            paths[_chain(frame, top)] += 1

    sys.setprofile(profile)
    try:
        func(*args)
    finally:
        sys.setprofile(None)
    return paths


def climbs(chain) -> list[str]:
    """The steps of a chain that call into a higher layer than the one calling."""
    ranks = [RANK[module.split(".")[1]] for module, _ in chain]
    return [f"{chain[i][0]} -> {chain[i + 1][0]}"
            for i in range(len(ranks) - 1) if ranks[i + 1] > ranks[i]]


def _render(chain) -> str:
    return " -> ".join(f"{module.removeprefix('specbench.')}:{name}" for module, name in chain)


@pytest.fixture
def cold_cache(tmp_path, monkeypatch):
    from specbench.store import cache
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    cache.clear_memory()
    yield
    cache.clear_memory()


def _check(paths: Counter, most: int, extra: int = 0) -> None:
    assert paths, "the traced function read no file: the trace saw nothing"
    longest = max(paths, key=len)
    assert len(longest) + extra <= most, (
        f"{len(longest) + extra} functions between the page and its runs (at most {most}):\n"
        + _render(longest))
    back = {step for chain in paths for step in climbs(chain)}
    assert not back, "a path climbs back into a higher layer: " + "; ".join(sorted(back))


def test_the_headline_mape_reaches_its_runs_in_few_steps(committed_store, cold_cache):
    """The front page glues the headline MAPE (``s_mape_model``) from ``findings.numbers``,
    which takes it from ``summary.summary``: the chapter's function is one stop, the summary's
    chains through the headline's inputs the rest (the summary's other values — the sealed
    verdict, the lossless test — travel their own paths)."""
    from specbench.report.summary import summary
    paths = read_paths(summary, committed_store)
    headline = Counter({chain: n for chain, n in paths.items()
                        if len(chain) > 1 and chain[1][1] in HEADLINE_INPUTS})
    _check(headline, HEADLINE_MAX, extra=1)


def test_the_host_floor_numbers_reach_their_runs_in_few_steps(committed_store, cold_cache):
    from specbench.report.chapters.host_floor import numbers
    _check(read_paths(numbers, committed_store), FLOOR_MAX)


def test_the_tracer_sees_a_climb_back():
    """A chain from the store back up into the report is named."""
    chain = (("specbench.report.floor", "numbers"), ("specbench.store.runs", "load_runs"),
             ("specbench.derive.analysis", "sweep_cells"))
    assert climbs(chain) == ["specbench.store.runs -> specbench.derive.analysis"]
