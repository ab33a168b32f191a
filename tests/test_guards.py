"""A guarded sentence fails the chapter — and so the book build — when the data contradict it.

A copy of the committed run store is perturbed so that one cell drafted fewer than γ tokens;
the accuracy chapter, executed against that copy ($SPECBENCH_RUNS), must stop with an error
naming the sentence it would otherwise print.
"""
import os
import shutil
import stat
from pathlib import Path

import jupytext
import pandas as pd
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from specbench import numbers
from specbench.wording import ClaimError

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "no step drafted fewer than γ tokens"


def _writable_copy(tmp_path: Path) -> Path:
    store = tmp_path / "runs"
    shutil.copytree(ROOT / "runs", store)
    for path in store.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return store


@pytest.fixture
def short_draft_store(tmp_path):
    store = _writable_copy(tmp_path)
    first = sorted(store.glob("cpu-amd-epyc-1t-bfloat16/sweep-*/cells.csv"))[-1]
    cells = pd.read_csv(first)
    i = cells.index[(cells["gamma"] > 0) & (cells["drafts"] > 0)][0]
    cells.loc[i, "draft_tokens"] -= 1          # one drafting step proposed γ−1 tokens
    cells.to_csv(first, index=False)
    return store


def test_the_unperturbed_store_passes_the_guard():
    assert numbers.accuracy()["no_short_drafts"].startswith(SENTENCE)


def test_perturbed_run_fails_the_numbers_with_the_sentence(short_draft_store):
    with pytest.raises(ClaimError, match=SENTENCE):
        numbers.accuracy(short_draft_store)


def test_perturbed_run_fails_the_chapter_build(short_draft_store):
    notebook = jupytext.read(ROOT / "book" / "accuracy.md")
    env = {**os.environ, "SPECBENCH_RUNS": str(short_draft_store),
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
