"""The run store, file I/O only: immutable runs with their manifests and tables (``runs``),
sealed predictions (``sealing``), host sessions read from the manifests (``hosts``), the named
kill points that test resumption (``faults``), and the cache that computes a whole-store
result once per store content (``cache``). It imports neither the engine nor the measurement:
what a manifest states is gathered by :mod:`specbench.measure.contract`."""
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs

__all__ = ["DEFAULT_ROOT", "Run", "load_runs"]
