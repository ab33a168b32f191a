"""The front page's numbers: the abstract quotes the story's findings — acceptance, what a step
is made of, the models' errors, the verify cost, transfer and the sampling defect — computed by
the same function, so the two pages cannot disagree."""
from __future__ import annotations

from specbench.report.chapters import story
from specbench.report.chapters.base import Numbers
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["numbers"]


def numbers(root=DEFAULT_ROOT, cells=None) -> Numbers:
    """The front page: the story's numbers (the abstract's findings are the story's)."""
    return story.numbers(root, cells)
