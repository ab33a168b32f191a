"""A finished sweep's engines checked against each other, at the end of the run: the γ=0
engine's plain step against the speculative engines' (:mod:`specbench.derive.engine_agreement`),
recorded in the manifest's ``load`` beside the host's noise."""
from __future__ import annotations

import math
import warnings

from specbench.derive.engine_agreement import agreement_row
from specbench.store.runs import Run

__all__ = ["record_engine_agreement"]


def record_engine_agreement(run: Run) -> None:
    """The γ=0 engine's plain step against the speculative engines' (manifest 'load'); a
    warning where the engine instances ran the same work at different speeds."""
    agreement = agreement_row(run)
    slower = agreement["base_slower_pct"]
    run.update_manifest(load={**run.manifest.get("load", {}),
                              "base_engine_slower_pct": None if math.isnan(slower) else slower})
    if not agreement["engines_agree"]:
        warnings.warn(f"{run.path}: the γ=0 engine's plain step took {slower:.0f} % longer than "
                      "the speculative engines' (it does less): the engine instances ran at "
                      "different speeds, and its speedups are not speculation's. The run is kept "
                      "and named (the step chapter); `make measure` again before planning from "
                      "it", stacklevel=3)
