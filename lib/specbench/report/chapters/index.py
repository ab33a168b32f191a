"""The front page's numbers: the regime of each SKU and what the data supports."""
from __future__ import annotations

from specbench.report.chapters.base import (
    Numbers,
    greedy_cells,
    regime_sentence,
    regime_table,
    run_ids,
)
from specbench.report.chapters.story import thesis
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["numbers"]



# -- chapters ------------------------------------------------------------------------------

def numbers(root=DEFAULT_ROOT) -> Numbers:
    """The front page: which regime each SKU is in, and what the data supports."""
    cells = greedy_cells(root)
    table = regime_table(root, cells)
    n = Numbers()
    n.add(run_ids(cells) + [r for r in table["host-floor run"] if r != "—"],
          regime_sentence=regime_sentence(table), n_skus=len(table),
          thesis=thesis(cells, table))
    return n


