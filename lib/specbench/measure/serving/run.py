"""A serving run: one server per γ, every workload and load level, written to the store."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from specbench.engine.vllm_engine import EngineSettings
from specbench.measure.serving.client import (
    client_argv,
    custom_dataset,
    measure_level,
    run_client,
)
from specbench.measure.serving.config import (
    LOOPBACK,
    PERCENTILES,
    Arm,
    LoadError,
    ServingConfig,
    workload_file,
)
from specbench.measure.serving.server import Server, ServerError
from specbench.measure.workloads import builtin as workloads
from specbench.store.runs import REPO_ROOT, Run, create_run, sha256_file

__all__ = ["run_serving"]


# -- one arm: a server, every workload and level ----------------------------------------------

def _measure_arm(cfg: ServingConfig, model: str, arm: Arm, datasets: dict, tmp: Path,
                 rows: list, per_request: list, servers: list, progress) -> None:
    load = cfg.load
    settings = EngineSettings(model=model, gamma=arm.gamma, dtype=cfg.dtype,
                              batch_schedule=arm.schedule)
    with Server(settings, ready_timeout_s=cfg.ready_timeout_s, log_dir=tmp) as server:
        servers.append({"arm": arm.name, "gamma": arm.gamma, "port": server.port,
                        "startup_s": round(server.startup_s, 1),
                        "command": server.command()[1:]})
        progress(f"[serving] {arm.name} server healthy on {server.base_url} in "
                 f"{server.startup_s:.0f} s")
        for workload in load.workloads:
            if load.warmup_prompts:
                run_client(client_argv(server, workload, datasets[workload], load,
                                       "concurrency", min(2, load.warmup_prompts),
                                       load.warmup_prompts, tmp))
            for mode, level in load.levels():
                key = {"arm": arm.name, "workload": workload, "gamma": arm.gamma,
                       "source": _source(workload), "measured_as": arm.name}
                row, reqs = measure_level(server, workload, datasets[workload], load,
                                          mode, level, tmp)
                rows.append({**key, **row})
                per_request.append(reqs.assign(**key, mode=mode, level=level,
                                               request=range(len(reqs))))
                progress(f"[serving] {arm.name} {workload} {mode} {level:g}: median TPOT "
                         f"{row['p50_tpot_ms']:.1f} ms, goodput {row['goodput']:.2f} req/s, "
                         f"mean batch {row['mean_running']:.2f}")
    if server.leftover_pids():
        raise ServerError(f"processes {server.leftover_pids()} outlived the server")


def _source(workload: str) -> str:
    if workload_file(workload) is not None:
        return "file"
    return "project" if workload in workloads.WORKLOADS else "spec_bench"


# -- the run ----------------------------------------------------------------------------------

def _manifest(cfg: ServingConfig, model: str, ids: dict[str, list[int]]) -> dict:
    from specbench.measure.contract import contract

    load = cfg.load
    example = Server(EngineSettings(model=model, gamma=max(cfg.gammas), dtype=cfg.dtype),
                     port=0)
    dataset = Path(load.dataset_path)
    return {
        **contract("serving", model, cfg.dtype),
        "grid": {"gammas": list(cfg.gammas), "workloads": list(load.workloads),
                 "concurrencies": list(load.concurrencies),
                 "request_rates": list(load.request_rates),
                 "arms": [{"name": a.name, "gamma": a.gamma,
                           "schedule": [list(e) for e in a.schedule] if a.schedule else None}
                          for a in cfg.arms()]},
        # The operator's plan, as it was before the load: what the planning chapter judges.
        "plan": cfg.plan,
        "server": {
            "command": [("<python>" if i == 0 else a) for i, a in enumerate(example.command())],
            "command_note": "one server per γ; --port is a free loopback port chosen at start; "
                            "without --speculative-config for γ=0",
            "host": LOOPBACK},
        "load": {
            "client": "vllm.benchmarks.serve (add_cli_args + main), vLLM's `vllm bench serve`",
            "num_prompts": load.num_prompts, "output_len": load.output_len,
            "warmup_prompts": load.warmup_prompts, "seed": load.seed,
            "percentiles": list(PERCENTILES), "temperature": 0,
            "closed_loop": "--max-concurrency C, all requests released at once",
            "open_loop": "--request-rate R, Poisson arrivals, no concurrency cap",
            "loadavg_at_start": os.getloadavg()},
        "slo": {**asdict(load.slo), "rule": "a request qualifies when TTFT ≤ ttft_ms and "
                "TPOT ≤ tpot_ms (client --goodput); a level meets the SLO at p95 when p95 "
                "TTFT and p95 TPOT are within the limits"},
        "dataset": {
            "spec_bench_path": os.path.relpath(dataset, REPO_ROOT),
            "spec_bench_sha256": sha256_file(dataset) if ids else None,
            "question_ids": ids,
            "selection": "first num_prompts questions of each category in file order "
                         "(--disable-shuffle), first turn, the tokenizer's chat template",
            "project_workloads": workloads.describe() if set(load.workloads) & set(
                workloads.WORKLOADS) else None,
            "workload_files": {w: _file_record(workload_file(w)) for w in load.workloads
                               if workload_file(w) is not None}},
        "economics": {"price_per_replica_hour_usd": cfg.price_per_replica_hour,
                      "demand_tokens_per_s": cfg.demand_tokens_per_s,
                      "note": "parameters, not measurements; whole replicas"},
        "notes": cfg.notes,
    }


def _file_record(path: Path) -> dict:
    """A prompt file's hash and size, and the Spec-Bench question ids its lines carry (a file
    written by `specbench spec-bench-prompts`), never its prompts."""
    from specbench.measure.workloads.operator_file import json_lines
    rows = [row for _, row in json_lines(path)]
    ids = [row["question_id"] for row in rows if "question_id" in row]
    categories = sorted({row["category"] for row in rows if "category" in row})
    return {"file": path.name, "sha256": sha256_file(path), "lines": len(rows),
            "spec_bench_question_ids": ids or None, "spec_bench_categories": categories or None}


def _check_question_ids(dataset: str, category: str, n: int, expected: list[int]) -> None:
    """The prompts vLLM's SpecBench class picks are the questions the manifest names."""
    from vllm.benchmarks.datasets.datasets import SpecBench

    picked = [d["prompt"] for d in SpecBench(dataset_path=dataset, category=category,
                                             disable_shuffle=True).data[:n]]
    by_prompt = {}
    for line in Path(dataset).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_prompt.setdefault(row["turns"][0], int(row["question_id"]))
    got = [by_prompt[p] for p in picked]
    if got != expected[:len(got)]:
        raise LoadError(f"{dataset}: vLLM's spec_bench dataset picked questions {got} for "
                        f"{category!r}, expected {expected}")


def run_serving(cfg: ServingConfig, close: bool = True, progress=print) -> Run:
    """Measure every (γ, workload, level) into a new ``serving`` run."""
    ids = cfg.validate()          # every bad input fails here, before any server starts
    model = cfg.resolved_model()
    load = cfg.load
    for category, qids in ids.items():
        _check_question_ids(load.dataset_path, category, load.num_prompts, qids)
    run = create_run(Path(cfg.root), _manifest(cfg, model, ids))
    rows, per_request, servers = [], [], []
    with tempfile.TemporaryDirectory(prefix="specbench-serving-") as tmp:
        tmp = Path(tmp)
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(model)
        datasets = {w: (workload_file(w) if workload_file(w) is not None
                        else custom_dataset(w, load.num_prompts, tokenizer, tmp)
                        if w in workloads.WORKLOADS else Path(load.dataset_path))
                    for w in load.workloads}
        measured: dict[tuple, str] = {}     # (γ, schedule) -> the arm that measured it
        for arm in cfg.arms():
            same = measured.get((arm.gamma, arm.schedule))
            if same is not None:
                # The plan chose a configuration measured already: its rows are that arm's.
                rows += [{**r, "arm": arm.name, "measured_as": same}
                         for r in rows if r["arm"] == same]
                per_request += [r.assign(arm=arm.name, measured_as=same) for r in per_request
                                if (r["arm"] == same).all()]
                progress(f"[serving] {arm.name}: the configuration of {same}, measured already")
                continue
            measured[(arm.gamma, arm.schedule)] = arm.name
            _measure_arm(cfg, model, arm, datasets, tmp, rows, per_request, servers, progress)
    # Measurements only: costs, speedups and the crossover are computed from these tables in
    # the report layer (specbench.report.serving_economics).
    run.write_table("levels.csv", pd.DataFrame(rows))
    run.write_table("requests.csv", pd.concat(per_request, ignore_index=True))
    run.update_manifest(servers=servers, load={**run.manifest["load"],
                                               "loadavg_at_end": os.getloadavg()})
    if close:
        run.finish()
    return run


