"""The front page's numbers: the abstract quotes the study's findings
(:mod:`specbench.report.findings`) — acceptance, what a step is made of, the models' errors,
the verify cost, transfer and the sampling defect — the values the story chapter reads too, so
the two pages cannot disagree."""
from specbench.report.findings import numbers

__all__ = ["numbers"]
