"""The run store: one immutable, self-describing folder per run.

Layout: ``runs/<sku>/<run-id>/`` with

* ``manifest.json`` — the benchmark contract (model and tokenizer hashes, engine and version,
  hardware, threads, dtype, engine settings, workloads, sampling, grid, code revision, load,
  start and end time) and ``status``: ``running`` until the run completes, then ``complete``;
* ``parts/`` — one JSON file per finished unit of work (a sweep cell), written atomically while
  the run is in progress, so a killed run resumes from its last completed unit;
* tidy tables (``cells.csv``, ``reps.csv``, …) written when the run completes, plus the
  executed notebook.

Once complete, a run is never modified: :meth:`Run.write_text` refuses and the files are made
read-only. Every write goes to a temporary file in the same folder and is renamed into place, so
a reader never sees half a file. Reading validates the manifest against a JSON schema and the
tables against their column lists, naming the file and field at fault.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pandas as pd

__all__ = ["Run", "RunSchemaError", "create_run", "open_run", "load_runs", "atomic_write",
           "code_revision", "sha256_file", "now_iso", "TABLE_COLUMNS"]

SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[2]
# Where runs live unless a caller says otherwise: $SPECBENCH_RUNS, else the checkout's runs/.
DEFAULT_ROOT = Path(os.environ.get("SPECBENCH_RUNS", REPO_ROOT / "runs"))
# When set, create_run writes the new run's folder into this file: a cluster task (cluster.py)
# learns which run it started, so the task resumes that run when Slurm requeues it.
RUN_RECORD_ENV = "SPECBENCH_RUN_RECORD"

MANIFEST_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "run_id", "kind", "sku", "status", "started_at", "code",
                 "model", "engine", "hardware", "grid"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "run_id": {"type": "string", "minLength": 1},
        "kind": {"enum": ["sweep", "hostfloor", "overhead", "microbench", "lossless",
                          "selftest", "gpucheck", "serving"]},
        "sku": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]*$"},
        "status": {"enum": ["running", "complete"]},
        "started_at": {"type": "string"},
        "finished_at": {"type": ["string", "null"]},
        "code": {"type": "object", "required": ["revision"]},
        "model": {"type": "object", "required": ["name", "weights_sha256", "tokenizer_sha256"]},
        "engine": {"type": "object", "required": ["name", "version", "settings"]},
        "hardware": {"type": "object"},
        "grid": {"type": "object"},
    },
}

# Columns every reader may rely on, by table.
TABLE_COLUMNS = {
    "cells.csv": ["workload", "gamma", "batch", "status", "pot_ms", "ttft_ms", "alpha",
                  "mean_acceptance_length", "speedup", "outputs_equal", "n_reps"],
    "reps.csv": ["workload", "gamma", "batch", "rep", "pot_ms", "ttft_ms", "decode_s",
                 "output_tokens", "drafts", "draft_tokens", "accepted_tokens"],
    "steps.csv": ["model", "tokens", "wall_ms", "compute_ms"],
    "families.csv": ["model", "tokens", "family", "self_ms"],
    "overhead.csv": ["rep", "read_counters", "wall_s"],
    # serving runs (specbench.serving)
    "levels.csv": ["workload", "gamma", "mode", "concurrency", "request_rate", "p50_itl_ms",
                   "p95_itl_ms", "p99_itl_ms", "p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms",
                   "p95_tpot_ms", "goodput", "qualified_tokens_per_s", "mean_running"],
    "serving/requests.csv": ["workload", "gamma", "mode", "level", "ttft_ms", "tpot_ms",
                             "output_len", "good"],
    # sweep runs: one row per request per timed call (specbench.sweep.request_rows)
    "sweep/requests.csv": ["workload", "gamma", "batch", "arm", "rep", "request",
                           "output_tokens", "pot_ms"],
    "speedup.csv": ["workload", "gamma", "concurrency", "speedup", "speedup_lo", "speedup_hi"],
    "crossover.csv": ["workload", "gamma", "crossover", "crossover_lo", "crossover_hi",
                      "verdict"],
}


class RunSchemaError(ValueError):
    """A run's file does not match the schema; the message names the file and the field."""


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def code_revision(repo: Path | None = None) -> dict:
    """The git commit of the code that produced a run, and whether the tree had changes."""
    repo = repo or REPO_ROOT
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "lib", "notebooks"],
                                    cwd=repo, capture_output=True, text=True).stdout.strip())
        return {"revision": rev, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"revision": "unknown", "dirty": None}


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class Run:
    path: Path
    manifest: dict
    _tables: dict = field(default_factory=dict, repr=False)

    @property
    def complete(self) -> bool:
        return self.manifest.get("status") == "complete"

    @property
    def sku(self) -> str:
        return self.manifest["sku"]

    @property
    def run_id(self) -> str:
        return self.manifest["run_id"]

    # -- writing (only while running) ---------------------------------------------------
    def _guard(self):
        if self.complete:
            raise PermissionError(f"{self.path} is a complete run and is never modified")

    def write_text(self, name: str, text: str) -> Path:
        self._guard()
        atomic_write(self.path / name, text)
        return self.path / name

    def write_table(self, name: str, frame: pd.DataFrame) -> Path:
        missing = [c for c in TABLE_COLUMNS.get(name, []) if c not in frame.columns]
        if missing:
            raise RunSchemaError(f"{self.path / name}: missing columns {missing}")
        return self.write_text(name, frame.to_csv(index=False))

    def write_part(self, key: str, record: dict) -> None:
        self.write_text(f"parts/{key}.json", json.dumps(record, indent=1))

    def parts(self) -> dict[str, dict]:
        """Finished units of work by key; a file that does not parse is reported by name."""
        found = {}
        for p in sorted((self.path / "parts").glob("*.json")):
            try:
                found[p.stem] = json.loads(p.read_text())
            except json.JSONDecodeError as exc:
                raise RunSchemaError(f"{p}: not valid JSON ({exc})") from exc
        return found

    def update_manifest(self, **fields) -> None:
        self._guard()
        self.manifest.update(fields)
        atomic_write(self.path / "manifest.json", json.dumps(self.manifest, indent=2))

    def finish(self) -> None:
        """Mark the run complete and make every file in it read-only."""
        self.update_manifest(status="complete", finished_at=now_iso())
        for p in self.path.rglob("*"):
            if p.is_file():
                p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    # -- reading ------------------------------------------------------------------------
    def table(self, name: str) -> pd.DataFrame:
        if name not in self._tables:
            self._tables[name] = read_table(self.path / name, self.manifest.get("kind"))
        return self._tables[name]


def read_table(path: Path, kind: str | None = None) -> pd.DataFrame:
    """Read one of the run tables and check its columns, naming the file and column. Tables
    whose name two run kinds share are checked against the columns of the run's ``kind``."""
    path = Path(path)
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise RunSchemaError(f"{path}: not a readable CSV table ({exc})") from exc
    for column in TABLE_COLUMNS.get(f"{kind}/{path.name}", TABLE_COLUMNS.get(path.name, [])):
        if column not in frame.columns:
            raise RunSchemaError(f"{path}: missing column {column!r}")
    numeric = {"gamma", "batch", "pot_ms", "ttft_ms", "n_reps", "rep", "output_tokens",
               "wall_ms", "compute_ms", "self_ms", "tokens"}
    for column in numeric & set(frame.columns):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna() & frame[column].notna()
        if bad.any():
            row = int(bad.idxmax())
            raise RunSchemaError(f"{path}: column {column!r} row {row + 2} is not a number: "
                                 f"{frame[column][row]!r}")
    return frame


def _read_manifest(path: Path) -> dict:
    file = path / "manifest.json"
    try:
        manifest = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise RunSchemaError(f"{file}: not valid JSON ({exc})") from exc
    try:
        jsonschema.validate(manifest, MANIFEST_SCHEMA)
    except jsonschema.ValidationError as exc:
        where = "/".join(map(str, exc.absolute_path)) or "(top level)"
        raise RunSchemaError(f"{file}: field {where}: {exc.message}") from exc
    return manifest


def create_run(root: Path, manifest: dict) -> Run:
    """Start a new run folder under ``root/<sku>/``; never reuses an existing folder."""
    started = now_iso()
    stamp = started.replace(":", "").replace("-", "").replace("+0000", "Z")[:15]
    run_id = f"{manifest['kind']}-{stamp}-{os.urandom(3).hex()}"
    path = Path(root) / manifest["sku"] / run_id
    path.mkdir(parents=True, exist_ok=False)
    manifest = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "running",
                "started_at": started, "finished_at": None, **manifest}
    jsonschema.validate(manifest, MANIFEST_SCHEMA)
    run = Run(path, manifest)
    atomic_write(path / "manifest.json", json.dumps(manifest, indent=2))
    if os.environ.get(RUN_RECORD_ENV):
        atomic_write(Path(os.environ[RUN_RECORD_ENV]), str(path.resolve()))
    return run


def open_run(path: Path) -> Run:
    """Open an existing run folder (validated)."""
    path = Path(path)
    if not (path / "manifest.json").exists():
        raise FileNotFoundError(f"{path}: no manifest.json — not a run folder")
    return Run(path, _read_manifest(path))


def load_runs(root: Path = DEFAULT_ROOT, kind: str | None = None,
              include_incomplete: bool = False) -> list[Run]:
    """All runs under ``root`` (every SKU), oldest first; incomplete runs are skipped."""
    runs = []
    for manifest in sorted(Path(root).glob("*/*/manifest.json")):
        run = open_run(manifest.parent)
        if kind and run.manifest["kind"] != kind:
            continue
        if run.complete or include_incomplete:
            runs.append(run)
    return sorted(runs, key=lambda r: r.manifest["started_at"])
