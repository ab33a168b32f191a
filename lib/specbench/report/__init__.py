"""Analysis and report, from stored runs only: the cells table with predictions (``analysis``),
the model's evaluation and leave-one-SKU-out (``evaluation``, ``transfer``), the planner
(``plan``), derived series, figures, tables and words (``curves``, ``charts``, ``tables``,
``wording``), serving economics (``serving_economics``), and one module per book chapter
(``chapters``). Book chapters import from here and from ``specbench.cli`` only."""
from specbench.store.runs import load_runs

__all__ = ["load_runs"]
