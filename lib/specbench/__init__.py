"""specbench: speculative decoding and the per-step cost it amortizes, measured.

The package is layered; each layer imports only those below it (checked by import-linter, see
``.importlinter``)::

    cli       the specbench command, the notebook runner, Slurm submission
    report    cells, evaluation, transfer, planning, charts, one module per chapter
    measure   sweep, serving, microbenchmark, lossless test, host floor, workloads
    store     the run store and the benchmark contract
    engine    the vLLM adapter, counters, hardware identity
    theory    eq. 1, the headline model, roofline, economics (pure functions)

What a reader's own notebook or script needs is exported here, so it does not depend on the
internal layout: ``load_runs``, ``sweep_cells`` (every cell with its predictions),
``error_table`` (the model's evaluation), ``leave_one_sku_out``, ``plan_from_runs``.
"""
__version__ = "0.1.0"

# Resolved on first use (PEP 562): ``import specbench`` stays light, e.g. in the engine's own
# processes, which import the package for its vLLM plugin.
_EXPORTS = {"load_runs": "specbench.store.runs", "sweep_cells": "specbench.report.analysis",
            "error_table": "specbench.report.evaluation",
            "leave_one_sku_out": "specbench.report.transfer",
            "plan_from_runs": "specbench.report.plan", "plan_explicit": "specbench.report.plan"}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'specbench' has no attribute {name!r}")
