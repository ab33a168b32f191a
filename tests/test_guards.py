"""A guarded sentence fails the chapter — and so the book build — when the data contradict it.

A copy of the committed run store is perturbed so that one cell claims more tokens per decode
step than a step can emit (γ+1: the target's own token plus γ accepted drafts); the regimes
chapter, executed against that copy ($SPECBENCH_RUNS), must stop with an error naming the
sentence it would otherwise print.
"""
import os
import re
from pathlib import Path

import jupytext
import pandas as pd
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from specbench.report.chapters import regimes
from specbench.report.wording import ClaimError

pytestmark = pytest.mark.data
ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "a step emits at most γ+1 tokens"


@pytest.fixture
def impossible_store(store_to_change):
    store = store_to_change
    first = sorted(store.glob("cpu-amd-epyc-1t-bfloat16/sweep-*/cells.csv"))[-1]
    cells = pd.read_csv(first)
    column = "emitted_per_step" if "emitted_per_step" in cells else "tokens_per_step"
    i = cells.index[(cells["gamma"] > 0) & (cells["workload"] == "repeat")][0]
    cells.loc[i, column] = cells.loc[i, "gamma"] + 2    # more than γ+1 tokens per step
    cells.to_csv(first, index=False)
    return store


def test_the_unperturbed_store_passes_the_guard():
    assert regimes.numbers()["emitted_bound"] == SENTENCE


def test_perturbed_run_fails_the_numbers_with_the_sentence(impossible_store):
    with pytest.raises(ClaimError, match=re.escape(SENTENCE)):
        regimes.numbers(impossible_store)


def test_perturbed_run_fails_the_chapter_build(impossible_store):
    notebook = jupytext.read(ROOT / "book" / "regimes.md")
    env = {**os.environ, "SPECBENCH_RUNS": str(impossible_store),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "book")}})
    old = dict(os.environ)
    os.environ.update(env)              # the kernel inherits this process's environment
    try:
        with pytest.raises(CellExecutionError) as failure:
            client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert "ClaimError" in str(failure.value) and SENTENCE in str(failure.value)
