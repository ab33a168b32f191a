"""specbench: speculative decoding and the per-step cost it amortizes, measured.

The package is layered; each layer imports only those below it, and the two on one line not
each other (checked by import-linter: the contracts in ``pyproject.toml``)::

    cli                the specbench command, the notebook runner, Slurm submission
    report | measure   report: planning, charts, tables, words, one module per chapter —
                       formats the derived tables, never the engine or a measurement;
                       measure: sweep, serving, microbenchmark, lossless test, host floor,
                       workloads, the manifest's contract — what runs the engine and writes runs
    derive             the tables computed from stored runs (sweep tables, the cells with
                       every prediction, evaluation, transfer and its tiers, sealed verdicts,
                       step fits, host-floor differencing, noise), for both of the above
    store | engine     store: the run store, file I/O only; engine: the vLLM adapter, the
                       counter readers, hardware identity
    theory             eq. 1, the headline model, roofline, economics, counters, SLOs (pure)

What a reader's own notebook or script needs is exported here, so it does not depend on the
internal layout: ``load_runs``, ``sweep_cells`` (every cell with its predictions),
``error_table`` (the model's evaluation), ``leave_one_sku_out``, ``plan_from_runs``.
"""
__version__ = "0.1.0"

# Resolved on first use (PEP 562): ``import specbench`` stays light, e.g. in the engine's own
# processes, which import the package for its vLLM plugin.
_EXPORTS = {"load_runs": "specbench.store.runs", "sweep_cells": "specbench.derive.analysis",
            "error_table": "specbench.derive.evaluation",
            "leave_one_sku_out": "specbench.derive.transfer",
            "plan_from_runs": "specbench.report.plan", "plan_explicit": "specbench.report.plan"}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'specbench' has no attribute {name!r}")
