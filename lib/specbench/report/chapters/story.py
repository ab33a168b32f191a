"""The story chapter's numbers: the study's findings (:mod:`specbench.report.findings`), which
the front page states too — one derived set of values both chapters read."""
from specbench.report.findings import numbers, thesis

__all__ = ["numbers", "thesis"]
