"""The CPU host floor's profiler: vLLM's own torch profiler in the engine-core worker.

The same multi-process vLLM engine the sweep times runs with ``profiler_config``; "compute" is
the summed self time of the worker's operators in the families of :data:`COMPUTE_FAMILIES`
(one place, tested). Wall time is taken by the caller around the call, so host-exposed time
includes the scheduler, the inter-process hops and the output processing.
"""
from __future__ import annotations

import re
from pathlib import Path

from specbench.derive.decompose import HOST_FAMILY, StepProfile

__all__ = ["COMPUTE_FAMILIES", "classify", "self_times", "read_trace", "profile_cpu_decode"]

# Operator families, matched in order against the profiler's operator names. Everything a
# family lists is arithmetic on tensors; "compute" is the sum of these families' self time.
# Unmatched operators (copies, views, allocation, indexing, Python-side glue) count as host:
# they are the per-step bookkeeping the paper calls the host/scheduler term.
COMPUTE_FAMILIES: dict[str, str] = {
    "matmul": r"\b(mm|addmm|bmm|matmul|linear|gemm|onednn|dnnl|mkl|brgemm)\b|_mm\b|gemm|onednn",
    "attention": r"attention|attn|sdpa|flash|paged",
    "normalisation": r"norm",
    "activation": r"silu|gelu|relu|act_and_mul|sigmoid",
    "rotary": r"rotary|rope",
    "embedding": r"embedding",
    "sampling": r"argmax|topk|top_k|sort|softmax|sample|multinomial|logits",
    "elementwise": r"aten::(add|mul|sub|div|rsqrt|pow|exp|neg|mean|sum|max|min|where|clamp)_?$",
}
_COMPILED = [(name, re.compile(pattern, re.IGNORECASE))
             for name, pattern in COMPUTE_FAMILIES.items()]


def classify(op_name: str) -> str:
    """The family of one profiler operator name (``HOST_FAMILY`` when none matches)."""
    for family, pattern in _COMPILED:
        if pattern.search(op_name):
            return family
    return HOST_FAMILY



def self_times(trace_events: list[dict]) -> dict[str, float]:
    """Self time in ms per operator name from Chrome-trace ``cpu_op`` events.

    Operators nest (``aten::linear`` calls ``aten::addmm``); an operator's self time is its
    duration less that of the operators directly inside it, per thread."""
    ops = sorted((e for e in trace_events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    totals: dict[str, float] = {}
    stack: list[list] = []  # [end, name, self_us, thread]
    for event in ops:
        thread, start, end = (event["pid"], event["tid"]), event["ts"], event["ts"] + event["dur"]
        while stack and (stack[-1][3] != thread or stack[-1][0] <= start):
            _, name, own, _ = stack.pop()
            totals[name] = totals.get(name, 0.0) + own
        if stack:
            stack[-1][2] -= event["dur"]
        stack.append([end, event["name"], float(event["dur"]), thread])
    for _, name, own, _ in stack:
        totals[name] = totals.get(name, 0.0) + own
    return {name: us / 1e3 for name, us in totals.items()}


def read_trace(path: Path) -> list[dict]:
    """The events of a torch profiler Chrome trace (``.json`` or ``.json.gz``)."""
    import gzip
    import json

    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            return json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: not a torch profiler Chrome trace ({exc})") from exc


def _wait_until_quiet(folder: Path, deadline: float, quiet_s: float = 1.5) -> None:
    """Wait until no file in ``folder`` has changed for ``quiet_s``: the worker writes the
    trace and its summary table after stop_profile returns, and a timed call must not
    overlap that work."""
    import time

    while time.time() < deadline:
        newest = max((p.stat().st_mtime for p in folder.iterdir()), default=0.0)
        if time.time() - newest > quiet_s:
            return
        time.sleep(0.3)


def profile_cpu_decode(engine, prompt_ids: list[int], tokens: int, timeout_s: float = 120):
    """Profile one greedy call of ``tokens`` new tokens in the engine's worker."""
    import time

    trace_dir = Path(engine.settings.profiler_dir)
    before = set(trace_dir.glob("*.json*"))
    engine.llm.start_profile()
    start = time.perf_counter()
    engine.generate([prompt_ids], tokens, read_counters=False)
    wall = time.perf_counter() - start
    engine.llm.stop_profile()
    deadline = time.time() + timeout_s
    while not (new := sorted(set(trace_dir.glob("*.json*")) - before)):
        if time.time() > deadline:
            raise TimeoutError(f"{trace_dir}: the profiler wrote no trace in {timeout_s} s")
        time.sleep(0.2)
    _wait_until_quiet(trace_dir, deadline)
    families: dict[str, float] = {}
    for name, ms in self_times(read_trace(new[-1])).items():
        family = classify(name)
        families[family] = families.get(family, 0.0) + ms
    for path in new:
        path.unlink()
    return StepProfile(tokens, 1e3 * wall, families)
