"""The report, from the derived tables (``specbench.derive``: the cells with their predictions,
evaluation, transfer, sealed verdicts): the planner (``plan``), derived series, figures, tables
and words (``curves``, ``charts``, ``tables``, ``wording``), serving economics
(``serving_economics``), and one module per book chapter (``chapters``). Book chapters import
from here, from ``specbench.derive`` and from ``specbench.cli`` only."""
from specbench.store.runs import load_runs

__all__ = ["load_runs"]
