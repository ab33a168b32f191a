"""The γ × batch × workload sweep through the real engine.

For each γ one engine is started (vLLM fixes γ per instance); for each (workload, batch) cell it
runs warmup calls, then timed repetitions. Each repetition records its decode window (prefill
excluded), TTFT, output tokens and the spec-decode counter delta read around that very call.
Each finished cell is written at once as a part of the run, so a killed sweep resumes from its
last completed cell; a cell whose engine fails is recorded as failed and the sweep goes on.
When every cell is done the run's tables are derived from the parts and the run is closed.
"""
from __future__ import annotations

import os
import statistics
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from . import faults, workloads
from .cliargs import DTYPES
from .contract import contract
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
        for w in self.workloads:
            if w not in workloads.WORKLOADS:
                raise ValueError(f"unknown workload {w!r}; choose from "
                                 f"{sorted(workloads.WORKLOADS)}")
        if self.max_tokens < 2:
            raise ValueError(f"max_tokens must be >= 2 (decode needs two tokens), got "
                             f"{self.max_tokens}")
        if self.reps < 1 or self.warmup < 0:
            raise ValueError(f"reps must be >= 1 and warmup >= 0, got {self.reps}, {self.warmup}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        EngineSettings(model=self.resolved_model(), dtype=self.dtype).validate()

    @classmethod
    def from_manifest(cls, manifest: dict) -> "SweepConfig":
        """The configuration an existing run was started with (for resuming it)."""
        grid = manifest["grid"]
        return cls(model=manifest["model"]["path"], gammas=tuple(grid["gammas"]),
                   batches=tuple(grid["batches"]), workloads=tuple(grid["workloads"]),
                   max_tokens=grid["max_tokens"], warmup=grid["warmup"], reps=grid["reps"],
                   dtype=manifest["dtype"], max_load=manifest["load"]["max_load"],
                   notes=manifest.get("notes", ""))

    def resolved_model(self) -> str:
        if self.model:
            return str(self.model)
        from .assets import embedded_model_dir
        return str(embedded_model_dir())

    def cells(self) -> list[tuple[int, str, int]]:
        return [(g, w, b) for g in self.gammas for w in self.workloads for b in self.batches]


def cell_key(gamma: int, workload: str, batch: int) -> str:
    return f"g{gamma}-{workload}-b{batch}"


def _manifest(cfg: SweepConfig, model: str) -> dict:
    return {
        **contract("sweep", model, cfg.dtype),
        "workloads": workloads.describe(),
        "sampling": {w: workloads.sampling(w) for w in cfg.workloads},
        "grid": {"gammas": list(cfg.gammas), "batches": list(cfg.batches),
                 "workloads": list(cfg.workloads), "max_tokens": cfg.max_tokens,
                 "warmup": cfg.warmup, "reps": cfg.reps,
                 "reduced": (tuple(cfg.gammas), tuple(cfg.batches)) != ((0, 2, 4, 6), (1, 4))},
        "load": {"max_load": cfg.max_load, "loadavg_at_start": os.getloadavg()},
        "latency_definitions": {
            "pot_ms": "per-output-token decode latency: (last token − first token) / "
                      "(output tokens − 1), engine-core timestamps, per request; median over "
                      "requests, then over repetitions",
            "ttft_ms": "time to first token (prefill included), median",
            "prefill_in_throughput": False},
        "notes": cfg.notes,
    }


def _run_cell(engine: Engine, workload: str, batch: int, cfg: SweepConfig,
              progress=None) -> dict:
    prompts = [engine.encode_chat(workloads.messages(workload, i)) for i in range(batch)]
    sampling = workloads.sampling(workload)
    for _ in range(cfg.warmup):
        engine.generate(prompts, cfg.max_tokens, sampling)
    faults.point("mid-cell")
    reps, outputs = [], None
    for rep in range(cfg.reps):
        load = os.getloadavg()[0]
        with ForeignCpu() as foreign:
            gen = engine.generate(prompts, cfg.max_tokens, sampling)
        outputs = outputs or gen.token_ids
        row = {"rep": rep, "pot_ms": 1e3 * statistics.median(gen.pot_s),
               "ttft_ms": 1e3 * statistics.median(gen.ttft_s),
               "decode_s": max(gen.decode_s), "wall_s": gen.wall_s,
               "output_tokens": sum(gen.output_tokens), "loadavg_1m": load,
               "foreign_cores": foreign.foreign_cores,
               "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_pos": ""}
        if gen.counters is not None:
            row.update(gen.counters.as_row())
            # The cumulative reading proves the delta was taken around this very call.
            row["draft_tokens_cumulative"] = gen.counters_after.draft_tokens
        reps.append(row)
        if progress is not None:
            progress.set_postfix_str(f"γ={engine.settings.gamma} {workload} b{batch} "
                                     f"rep {rep + 1}/{cfg.reps}")
    return {"status": "ok", "reps": reps, "outputs": outputs,
            "prompt_tokens": [len(p) for p in prompts]}


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
    :class:`SweepInterrupted` once the engine is shut down; a failed write (a full disk)
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
    """Every cell in ``todo``, one engine per γ, each written as a part when done."""
    for gamma in sorted({g for g, _, _ in todo}):
        cells = [(w, b) for g, w, b in todo if g == gamma]
        try:
            engine = Engine(EngineSettings(model=model, gamma=gamma, dtype=cfg.dtype))
        except Exception as exc:  # noqa: BLE001 - recorded, and the sweep goes on
            if interrupts.seen:   # the engine died of the user's Ctrl-C: not a failed cell
                raise KeyboardInterrupt from exc
            for w, b in cells:
                run.write_part(cell_key(gamma, w, b), _failure(gamma, w, b, exc))
                bar.update()
            continue
        with engine:
            faults.point("after-engine-start")
            for w, b in cells:
                try:
                    record = _run_cell(engine, w, b, cfg, bar)
                except Exception as exc:  # noqa: BLE001
                    if interrupts.seen:
                        raise KeyboardInterrupt from exc
                    record = _failure(gamma, w, b, exc)
                else:
                    record.update(gamma=gamma, workload=w, batch=b,
                                  engine_startup_s=round(engine.startup_s, 2))
                run.write_part(cell_key(gamma, w, b), record)
                bar.update()


def _failure(gamma, workload, batch, exc) -> dict:
    return {"status": "failed", "gamma": gamma, "workload": workload, "batch": batch,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=5)}


def finalize(run: Run, cfg: SweepConfig, close: bool = True) -> None:
    """Derive reps.csv and cells.csv from the parts and (by default) close the run."""
    parts = run.parts()
    reps, cells = summarize(parts, cfg.max_load)
    run.write_table("reps.csv", reps)
    faults.point("during-finalize")
    run.write_table("cells.csv", cells)
    run.update_manifest(load={**run.manifest.get("load", {}),
                              "loadavg_at_end": os.getloadavg(),
                              "cells_flagged_loaded": int((cells["loaded"] == True).sum())})  # noqa: E712
    if close:
        run.finish()


def summarize(parts: dict[str, dict], max_load: float = 2.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tidy tables from the per-cell records: one row per repetition, one per cell."""
    rep_rows, cell_rows = [], []
    for record in parts.values():
        key = {k: record[k] for k in ("workload", "gamma", "batch")}
        if record["status"] != "ok":
            cell_rows.append({**key, "status": "failed", "error": record["error"], "n_reps": 0})
            continue
        reps = pd.DataFrame(record["reps"])
        rep_rows += [{**key, **r} for r in record["reps"]]
        drafted = int(reps["draft_tokens"].sum())
        accepted = int(reps["accepted_tokens"].sum())
        drafts = int(reps["drafts"].sum())
        # Decode steps, summed over the batch's requests: a step emits 1 + its accepted
        # drafts, so steps = decoded − accepted. vLLM counts the drafts accepted in a request's
        # last step even when max_tokens cuts them off, so that can fall below the number of
        # steps that drafted; every drafting step is a step, hence the max.
        decoded = int((reps["output_tokens"] - key["batch"]).sum())
        steps = max(drafts, decoded - accepted)
        cell_rows.append({
            **key, "status": "ok", "error": "", "n_reps": len(reps),
            "pot_ms": reps["pot_ms"].median(), "pot_ms_min": reps["pot_ms"].min(),
            "pot_ms_max": reps["pot_ms"].max(), "ttft_ms": reps["ttft_ms"].median(),
            "prompt_tokens": int(np.mean(record["prompt_tokens"])),
            "drafts": drafts, "draft_tokens": drafted, "accepted_tokens": accepted,
            # With no draft at all (n-gram found no match) a cycle emits exactly one token,
            # which is α = 0 in eq. 1; draft_tokens = 0 says so in the table.
            "alpha": accepted / drafted if drafted else 0.0,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else 1.0,
            "tokens_per_step": decoded / steps if steps else np.nan,
            # Deltas of a deterministic greedy cell repeat exactly; the cumulative readings
            # that bound them must still advance with every repetition.
            "counters_in_line": bool(key["gamma"] == 0 or drafted == 0 or (
                reps["draft_tokens_cumulative"].is_monotonic_increasing
                and reps["draft_tokens_cumulative"].nunique() == len(reps))),
            "loadavg_1m": reps["loadavg_1m"].max(),
            # Contention: other processes kept more than a quarter of a core busy.
            "foreign_cores": reps["foreign_cores"].max() if "foreign_cores" in reps else np.nan,
            "loaded": bool(reps["foreign_cores"].max() > MAX_FOREIGN_CORES
                           if "foreign_cores" in reps else reps["loadavg_1m"].max() > max_load),
            "_outputs": record["outputs"],
        })
    # With no successful cell the measured columns do not exist yet: the table still has them
    # (empty), so the run closes and lists every cell's cause.
    cells = pd.DataFrame(cell_rows)
    cells = cells.reindex(columns=list(dict.fromkeys(
        [*TABLE_COLUMNS["cells.csv"], "error", "loaded", "_outputs", *cells.columns])))
    cells = cells.sort_values(["workload", "batch", "gamma"]).reset_index(drop=True)
    cells["speedup"] = np.nan
    cells["outputs_equal"] = pd.NA
    cells["first_mismatch"] = pd.NA
    for (w, b), group in cells.groupby(["workload", "batch"]):
        base = group[(group["gamma"] == 0) & (group["status"] == "ok")]
        if base.empty:
            continue
        base_pot, base_out = base["pot_ms"].iloc[0], base["_outputs"].iloc[0]
        for i in group.index:
            if cells.at[i, "status"] != "ok":
                continue
            cells.at[i, "speedup"] = base_pot / cells.at[i, "pot_ms"]
            equal, where = _compare(base_out, cells.at[i, "_outputs"])
            cells.at[i, "outputs_equal"] = equal
            cells.at[i, "first_mismatch"] = where
    cells = cells.drop(columns="_outputs")
    reps = pd.DataFrame(rep_rows)
    reps = reps.reindex(columns=list(dict.fromkeys([*TABLE_COLUMNS["reps.csv"], *reps.columns])))
    return reps, cells


def _compare(reference: list[list[int]], other: list[list[int]]) -> tuple[bool, int | None]:
    """Token-for-token equality of two batches; the first differing position if any."""
    first = None
    for ref, out in zip(reference, other):
        for pos, (a, b) in enumerate(zip(ref, out)):
            if a != b:
                first = pos if first is None else min(first, pos)
                break
    return first is None, first
