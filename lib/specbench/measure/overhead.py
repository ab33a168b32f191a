"""Benchmark of the harness's own cost: do the in-line counter reads slow what they measure?

One engine (γ=4, 'repeat', batch 1) runs the same call in alternating pairs, once with the
spec-decode counters read immediately before and after it (as the sweep does) and once
without, in ABBA order so drift cancels. The result is a ratio of medians from one run, never
a timed unit test: ``overhead_pct = 100·(median with reads / median without − 1)``, on the
whole wall-clock of the call including the reads
(:func:`specbench.derive.overhead.overhead_summary`). The target is ≤ 1 %.
"""
from __future__ import annotations

import os
import time

import pandas as pd
from tqdm import tqdm

from specbench.engine.vllm_engine import Engine, EngineSettings
from specbench.measure.contract import contract
from specbench.measure.load import ForeignCpu
from specbench.measure.workloads import builtin as workloads
from specbench.store.runs import Run, create_run

__all__ = ["run_overhead"]


def run_overhead(model: str | None = None, pairs: int = 8, gamma: int = 4,
                 max_tokens: int = 128, root: str = "runs", progress: bool = True) -> Run:
    if pairs < 1:
        raise ValueError(f"pairs must be >= 1, got {pairs}")
    if model is None:
        from specbench.engine.assets import embedded_model_dir
        model = str(embedded_model_dir())
    run = create_run(root, {**contract("overhead", model, "bfloat16"),
                            "grid": {"gamma": gamma, "workload": "repeat", "batch": 1,
                                     "max_tokens": max_tokens, "pairs": pairs,
                                     "order": "ABBA"},
                            "load": {"loadavg_at_start": os.getloadavg()}})
    rows = []
    with Engine(EngineSettings(model=model, gamma=gamma)) as engine:
        prompt = [engine.encode_chat(workloads.messages("repeat", 0))]
        sampling = workloads.sampling("repeat")
        engine.generate(prompt, max_tokens, sampling)  # warmup
        order = [True, False, False, True]
        for rep in tqdm(range(2 * pairs), desc="overhead", disable=not progress):
            read = order[rep % 4]
            with ForeignCpu() as foreign:
                start = time.perf_counter()
                gen = engine.generate(prompt, max_tokens, sampling, read_counters=read)
                wall = time.perf_counter() - start
            rows.append({"rep": rep, "read_counters": read, "wall_s": wall,
                         "pot_ms": 1e3 * gen.pot_s[0], "foreign_cores": foreign.foreign_cores})
        started = time.perf_counter()
        for _ in range(20):
            engine.counters()
        read_cost_ms = 1e3 * (time.perf_counter() - started) / 20
    run.write_table("overhead.csv", pd.DataFrame(rows))
    run.update_manifest(load={**run.manifest["load"], "loadavg_at_end": os.getloadavg()},
                        counter_read_ms=read_cost_ms)
    run.finish()
    return run
