"""The host-floor chapter's numbers (:mod:`specbench.report.floor`, which the story's findings
read too) and the decomposition its table shows."""
from specbench.derive.decompose import decompose
from specbench.report.floor import numbers

__all__ = ["numbers", "decompose"]
