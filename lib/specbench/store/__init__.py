"""The run store: immutable runs with their manifests (``runs``), the benchmark contract every
manifest carries (``contract``), the machine's load during a timed call (``load``) and the named
kill points that test resumption (``faults``)."""
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs

__all__ = ["DEFAULT_ROOT", "Run", "load_runs"]
