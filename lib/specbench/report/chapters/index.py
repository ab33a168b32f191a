"""The front page's numbers: today's study in a paragraph — the regime of each SKU, acceptance
across its range, the headline model against its rivals and its goal, transfer, the engine
defect and its fix — each computed from the same functions as the chapter that reports it."""
from __future__ import annotations

from specbench.report.analysis import sweep_cells
from specbench.report.chapters.base import (
    Numbers,
    greedy,
    regime_sentence,
    regime_table,
    run_ids,
)
from specbench.report.chapters.story import thesis
from specbench.report.chapters.summary import summary
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["numbers"]


def numbers(root=DEFAULT_ROOT) -> Numbers:
    """The front page: which regime each SKU is in, what the data supports, and the summary."""
    cells = greedy(sweep_cells(root))
    table = regime_table(root, cells)
    n = Numbers()
    n.add(run_ids(cells) + [r for r in table["host-floor run"] if r != "—"],
          regime_sentence=regime_sentence(table), n_skus=len(table),
          thesis=thesis(cells, table))
    return n.merge(summary(root, cells))
