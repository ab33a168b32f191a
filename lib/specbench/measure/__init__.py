"""Measurement: everything that runs the engine and writes a run. The γ-sweep (``sweep``, its
tables in ``sweep_tables``), a real server under load (``serving``), the kernel microbenchmark
(``microbench``), the lossless test (``lossless``), the harness's own overhead (``overhead``),
the host floor (``hostfloor`` with ``profiler``, ``nsys``, ``decompose``) and the workload
sources (``workloads``: built-in texts, Spec-Bench, an operator's file). Nothing here computes
economics or prose: that is the report's job, from stored runs."""
