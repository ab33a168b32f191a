"""A serving run: one server per γ, every workload and load level, written to the store.

Each level is written as a part of the run the moment it is measured
(:mod:`specbench.measure.serving.levels`), so a killed run keeps every level it finished.
``run_serving(resume=PATH)`` (``specbench serve-bench --resume PATH``) finishes such a run, as
``specbench sweep --resume`` finishes a sweep: with the load and plan its manifest recorded,
measuring only the levels without a part and starting no server for an arm whose levels are
all done. The tables (levels.csv, requests.csv) are built from the parts when every level is
done, and the run is closed.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from specbench.derive.serving_steps import arm_file_prefix
from specbench.derive.steps import STEP_RECORDS
from specbench.engine.drafts import draft_record
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
from specbench.measure.serving.levels import (
    Level,
    keep_level,
    level_record,
    level_tables,
    measured_levels,
    measuring_arms,
)
from specbench.measure.serving.server import Server, ServerError
from specbench.measure.workloads import builtin as workloads
from specbench.store.runs import REPO_ROOT, Run, create_run, now_iso, open_run, sha256_file

__all__ = ["run_serving", "ServingInterrupted"]


# -- one arm: a server, the levels it has left ------------------------------------------------

def _measure_arm(run: Run, cfg: ServingConfig, model: str, arm: Arm, levels: list[Level],
                 datasets: dict, tmp: Path, progress) -> None:
    """One server for ``arm``; for each workload with levels left, its warmup, then each
    level, written into the run the moment it is measured."""
    # Every engine step is recorded into the run (specbench.engine.step_records), one file per
    # arm: what a step under load holds, to check the scheduler-driven load prediction against.
    prefix = arm_file_prefix(arm.gamma, arm.planned, arm.draft_depth)
    settings = cfg.engine_settings(arm, step_records=str(run.path / STEP_RECORDS /
                                                          f"{prefix}.jsonl"))
    with Server(settings, ready_timeout_s=cfg.ready_timeout_s, log_dir=tmp) as server:
        record = {"arm": arm.name, "gamma": arm.gamma, "port": server.port,
                  "healthy_at": now_iso(), "startup_s": round(server.startup_s, 1),
                  "command": server.command()[1:],
                  # the engine's own KV cache: what a draft's layers take from the batch
                  "kv_cache": server.kv_cache()}
        progress(f"[serving] {arm.name} server healthy on {server.base_url} in "
                 f"{server.startup_s:.0f} s")
        for workload in dict.fromkeys(level.workload for level in levels):
            _warm_up(server, cfg, workload, datasets[workload], tmp)
            for level in (lv for lv in levels if lv.workload == workload):
                started = time.monotonic_ns()
                row, reqs = measure_level(server, workload, datasets[workload], cfg.load,
                                          level.mode, level.level, tmp)
                part = level_record(level, row, reqs, record)
                part["monotonic_ns"] = [started, time.monotonic_ns()]   # its steps' window
                keep_level(run, level, part)
                progress(f"[serving] {arm.name} {workload} {level.mode} {level.level:g}: "
                         f"median TPOT {row['p50_tpot_ms']:.1f} ms, goodput "
                         f"{row['goodput']:.2f} req/s, mean batch {row['mean_running']:.2f}")
    if server.leftover_pids():
        raise ServerError(f"processes {server.leftover_pids()} outlived the server")


def _warm_up(server: Server, cfg: ServingConfig, workload: str, dataset: Path,
             tmp: Path) -> None:
    """A few untimed requests before a workload's first level on this server, so no level
    pays the server's first requests (a resumed arm's fresh server is warmed the same way)."""
    load = cfg.load
    if load.warmup_prompts:
        run_client(client_argv(server, workload, dataset, load, "concurrency",
                               min(2, load.warmup_prompts), load.warmup_prompts, tmp))


def _datasets(cfg: ServingConfig, model: str, names: set[str], tmp: Path) -> dict[str, Path]:
    """The client's prompt file of each workload in ``names``: an operator's file as it is,
    'repeat'/'open' rendered with the chat template (the tokenizer is loaded for them only),
    Spec-Bench's question file for its categories."""
    load, tokenizer, found = cfg.load, None, {}
    for workload in (w for w in load.workloads if w in names):
        if workload_file(workload) is not None:
            found[workload] = workload_file(workload)
        elif workload in workloads.WORKLOADS:
            if tokenizer is None:
                from transformers import AutoTokenizer
                tokenizer = AutoTokenizer.from_pretrained(model)
            found[workload] = custom_dataset(workload, load.num_prompts, tokenizer, tmp)
        else:
            found[workload] = Path(load.dataset_path)
    return found


def _measure_levels(run: Run, cfg: ServingConfig, model: str, todo: list[Level],
                    progress) -> None:
    """Every level in ``todo``, one server per arm with levels left: an arm whose levels are
    all in the run starts none."""
    measuring = measuring_arms(cfg)
    for arm in cfg.arms():
        if measuring[arm.name].name != arm.name:
            progress(f"[serving] {arm.name}: the configuration of {measuring[arm.name].name}, "
                     "measured once")
    if not todo:
        return
    with tempfile.TemporaryDirectory(prefix="specbench-serving-") as tmp:
        tmp = Path(tmp)
        datasets = _datasets(cfg, model, {level.workload for level in todo}, tmp)
        for arm in dict.fromkeys(level.arm for level in todo):
            _measure_arm(run, cfg, model, arm, [lv for lv in todo if lv.arm == arm],
                         datasets, tmp, progress)


# -- the run ----------------------------------------------------------------------------------

def _manifest(cfg: ServingConfig, model: str, ids: dict[str, list[int]]) -> dict:
    from specbench.measure.contract import contract

    load = cfg.load
    example = Server(EngineSettings(model=model, gamma=max(cfg.gammas), dtype=cfg.dtype),
                     port=0)
    dataset = Path(load.dataset_path)
    return {
        **contract(cfg.kind, model, cfg.dtype),
        "grid": {"gammas": list(cfg.gammas), "workloads": list(load.workloads),
                 "concurrencies": list(load.concurrencies),
                 "request_rates": list(load.request_rates), "arms": _arms_record(cfg),
                 **({"drafts": [list(pair) for pair in cfg.drafts]} if cfg.drafts else {})},
        # Each draft the run serves: its provenance (depth, source hash) and weights.
        **({"draft_models": {str(depth): draft_record(cfg.draft_folder(depth))
                             for depth in dict.fromkeys(d for d, _ in cfg.drafts)}}
           if cfg.drafts else {}),
        # Written as the run goes: what a killed run keeps, and what resuming reads.
        "parts": "one JSON per finished level under parts/ (its levels.csv row, its "
                 "requests.csv rows, its server), written when the level finishes; the tables "
                 "are built from them once every level is done",
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
        "step_cost_probe": cfg.step_cost_probe,
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


# -- starting, resuming, finishing ------------------------------------------------------------

class ServingInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM through the CLI) stopped a serving run: its servers are stopped, its
    finished levels kept, and the run at :attr:`path` resumes with ``specbench serve-bench
    --resume PATH``."""

    def __init__(self, path: Path, done: int, total: int):
        super().__init__(f"interrupted: resume with `specbench serve-bench --resume {path}`")
        self.path, self.done, self.total = path, done, total


def _start(cfg: ServingConfig) -> Run:
    """A new serving run, once every input is checked (a bad one fails before any server
    starts and before any run folder is made)."""
    ids = cfg.validate()
    model = cfg.resolved_model()
    for category, qids in ids.items():
        _check_question_ids(cfg.load.dataset_path, category, cfg.load.num_prompts, qids)
    return create_run(Path(cfg.root), _manifest(cfg, model, ids))


def _reopen(path: Path, progress) -> tuple[Run, ServingConfig]:
    """The incomplete serving run at ``path`` and the configuration its manifest recorded.
    Refused, naming the path, when the run is complete or an input it measured changed."""
    run = open_run(path)
    if run.manifest["kind"] not in ("serving", "draft-serving"):
        raise LoadError(f"{path}: a {run.manifest['kind']} run, not a serving run")
    if run.complete:
        raise LoadError(f"{path}: the serving run is complete; there is nothing to resume")
    cfg = ServingConfig.from_manifest(run.manifest)
    _check_same_inputs(path, run.manifest, cfg, cfg.validate())
    run.discard_partial_writes()   # a part the kill cut short: its level is measured again
    done = len(run.parts())
    run.update_manifest(resumes=[*run.manifest.get("resumes", []),
                                 {"at": now_iso(), "levels_done": done}])
    progress(f"[serving] resuming {path}: {done} of {len(measured_levels(cfg))} levels done")
    return run, cfg


def _check_same_inputs(path: Path, manifest: dict, cfg: ServingConfig, ids: dict) -> None:
    """A resumed run serves what its first levels served: the same arms, prompts and model.
    A prompt file, Spec-Bench file or checkpoint that changed since is refused, naming it."""
    from specbench.measure.contract import model_identity

    recorded = manifest["dataset"]
    model = model_identity(cfg.resolved_model())
    changed = [
        ("the arms (γ and plan)", _arms_record(cfg) != manifest["grid"]["arms"]),
        (f"the Spec-Bench questions of {cfg.load.dataset_path}",
         ids != recorded["question_ids"] or (ids and sha256_file(Path(cfg.load.dataset_path))
                                             != recorded["spec_bench_sha256"])),
        *((f"the prompt file {workload_file(w)}",
           _file_record(workload_file(w)) != recorded["workload_files"].get(w))
          for w in cfg.load.workloads if workload_file(w) is not None),
        (f"the model {model['path']}",
         any(model[k] != manifest["model"][k] for k in ("weights_sha256", "tokenizer_sha256")))]
    for what, differs in changed:
        if differs:
            raise LoadError(f"{path}: {what} changed since the run started; resuming would mix "
                            "two measurements in one run (start a new run instead)")


def _arms_record(cfg: ServingConfig) -> list[dict]:
    return [{"name": a.name, "gamma": a.gamma,
             "schedule": [list(e) for e in a.schedule] if a.schedule else None,
             **({"draft_depth": a.draft_depth} if a.draft_depth is not None else {})}
            for a in cfg.arms()]


def _finish(run: Run, cfg: ServingConfig, close: bool) -> None:
    """The run's tables from its parts, the servers that measured them, and (by default) the
    run closed."""
    # Measurements only: costs, speedups and the crossover are computed from these tables in
    # the report layer (specbench.report.serving_economics).
    levels, requests, servers = level_tables(cfg, run.parts())
    run.write_table("levels.csv", levels)
    run.write_table("requests.csv", requests)
    run.update_manifest(servers=servers, load={**run.manifest["load"],
                                               "loadavg_at_end": os.getloadavg()})
    if close:
        run.finish()


def run_serving(cfg: ServingConfig | None, close: bool = True, progress=print,
                resume: str | Path | None = None) -> Run:
    """Measure every (arm, workload, level) into a new ``serving`` run, or finish the
    incomplete run at ``resume`` with the load its manifest recorded (``cfg`` is then unused).

    Each level is written as it finishes. Ctrl-C raises :class:`ServingInterrupted` once the
    servers are stopped; any other error carries ``run_path``, the resumable run."""
    run, cfg = _reopen(Path(resume), progress) if resume else (_start(cfg), cfg)
    levels = measured_levels(cfg)
    done = run.parts()
    try:
        _measure_levels(run, cfg, cfg.resolved_model(),
                        [level for level in levels if level.key not in done], progress)
        _finish(run, cfg, close)
    except KeyboardInterrupt:
        raise ServingInterrupted(run.path, len(run.parts()), len(levels)) from None
    except Exception as exc:
        exc.run_path = run.path
        raise
    return run
