"""Measurement: everything that runs the engine and writes a run. The γ-sweep (``sweep``), a
real server under load (``serving``), the kernel microbenchmark (``microbench``), the lossless
test (``lossless``), the harness's own overhead (``overhead``), the host floor (``hostfloor``
with ``profiler`` and ``nsys``), the workload sources (``workloads``: built-in texts,
Spec-Bench, an operator's file), the benchmark contract every manifest carries (``contract``)
and the machine's load during a timed call (``load``). The tables a run's records give are
derived in :mod:`specbench.derive`, where the report reads them too. Nothing here computes
economics or prose: that is the report's job, from stored runs."""
