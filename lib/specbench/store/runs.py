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
import io
import json
import os
import shutil
import stat
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pandas as pd

__all__ = ["Run", "RunSchemaError", "IncompleteRunWarning", "create_run", "open_run",
           "load_runs", "scan_runs", "atomic_write", "code_revision", "sha256_file", "now_iso",
           "TABLE_COLUMNS"]

SCHEMA_VERSION = 1
REPO_ROOT = Path(__file__).resolve().parents[3]
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
                          "selftest", "gpucheck", "serving", "prediction",
                          "draft-sweep", "draft-serving"]},
        "sku": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]*$"},
        "status": {"enum": ["running", "complete"]},
        "started_at": {"type": "string"},
        "finished_at": {"type": ["string", "null"]},
        "code": {"type": "object", "required": ["revision"],
                 "properties": {"revision": {"type": "string"}}},
        "model": {"type": "object", "required": ["name", "weights_sha256", "tokenizer_sha256"],
                  "properties": {"name": {"type": "string"}, "path": {"type": "string"}}},
        "engine": {"type": "object", "required": ["name", "version", "settings"],
                   "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                                  "settings": {"type": "object"}}},
        "dtype": {"type": "string"},
        "hardware": {"type": "object"},
        "grid": {"type": "object"},
        "files": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["sha256", "bytes"]}},
    },
    # What the readers of a sweep rely on (resume, analysis): the grid and the dtype.
    "allOf": [{"if": {"properties": {"kind": {"enum": ["sweep", "draft-sweep"]}}},
               "then": {"required": ["dtype"], "properties": {"grid": {
                   "required": ["gammas", "batches", "workloads", "max_tokens"],
                   "properties": {"gammas": {"type": "array", "items": {"type": "integer"}},
                                  "batches": {"type": "array", "items": {"type": "integer"}},
                                  "workloads": {"type": "array",
                                                "items": {"type": "string"}},
                                  "max_tokens": {"type": "integer"}}}}}}],
}

# The schema is checked against its meta-schema once, here: jsonschema.validate() re-checks it
# on every call, and that was nine tenths of the planning chapter's time (8,000 manifest reads).
_MANIFEST_VALIDATOR_CLASS = jsonschema.validators.validator_for(MANIFEST_SCHEMA)
_MANIFEST_VALIDATOR_CLASS.check_schema(MANIFEST_SCHEMA)
_MANIFEST_VALIDATOR = _MANIFEST_VALIDATOR_CLASS(MANIFEST_SCHEMA)


def _validate_manifest(manifest: dict) -> None:
    """Raise the most relevant :class:`jsonschema.ValidationError`, as ``jsonschema.validate``
    would."""
    error = jsonschema.exceptions.best_match(_MANIFEST_VALIDATOR.iter_errors(manifest))
    if error is not None:
        raise error


# Columns every reader may rely on, by table.
TABLE_COLUMNS = {
    "cells.csv": ["workload", "gamma", "batch", "status", "pot_ms", "ttft_ms", "alpha",
                  "mean_acceptance_length", "speedup", "outputs_equal", "n_reps"],
    "reps.csv": ["workload", "gamma", "batch", "rep", "pot_ms", "ttft_ms", "decode_s",
                 "output_tokens", "drafts", "draft_tokens", "accepted_tokens"],
    "steps.csv": ["model", "tokens", "wall_ms", "compute_ms"],
    "families.csv": ["model", "tokens", "family", "self_ms"],
    "overhead.csv": ["rep", "read_counters", "wall_s"],
    # serving runs (specbench.measure.serving)
    "levels.csv": ["workload", "gamma", "mode", "concurrency", "request_rate", "p50_itl_ms",
                   "p95_itl_ms", "p99_itl_ms", "p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms",
                   "p95_tpot_ms", "goodput", "qualified_tokens_per_s", "mean_running"],
    "serving/requests.csv": ["workload", "gamma", "mode", "level", "ttft_ms", "tpot_ms",
                             "output_len", "good"],
    # sweep runs: one row per request per timed call (specbench.derive.sweep_tables.request_rows)
    "sweep/requests.csv": ["workload", "gamma", "batch", "arm", "rep", "request",
                           "output_tokens", "pot_ms"],
    "speedup.csv": ["workload", "gamma", "concurrency", "speedup", "speedup_lo", "speedup_hi"],
    "crossover.csv": ["workload", "gamma", "crossover", "crossover_lo", "crossover_hi",
                      "verdict"],
}
# Columns that are text or flags; every other column a reader relies on must be a number.
TEXT_COLUMNS = {"workload", "status", "model", "family", "accepted_per_pos", "outputs_equal",
                "read_counters", "error", "mode", "arm", "request", "output_sha256", "level",
                "good", "verdict", "source", "ok"}
# Columns that must have a value in every row (a truncated table loses them in its last row);
# in cells.csv the measured ones only where status is 'ok'.
REQUIRED_VALUES = {
    "cells.csv": ["workload", "gamma", "batch", "status", "n_reps"],
    "reps.csv": ["workload", "gamma", "batch", "rep", "pot_ms", "ttft_ms", "decode_s",
                 "output_tokens"],
    "steps.csv": TABLE_COLUMNS["steps.csv"],
    "families.csv": TABLE_COLUMNS["families.csv"],
    "overhead.csv": TABLE_COLUMNS["overhead.csv"],
}
OK_CELL_VALUES = ["pot_ms", "ttft_ms", "alpha", "mean_acceptance_length"]


class RunSchemaError(ValueError):
    """A run's file does not match the schema; the message names the file and the field."""


class IncompleteRunWarning(UserWarning):
    """A run that was never closed (still running, or killed) was skipped; the message names
    it and says how to finish it."""


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


TMP_SUFFIX = ".tmp"


def atomic_write(path: Path, data: str | bytes, fault_point: str | None = None) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename.

    A failed write (a full disk) removes the temporary file, leaves any earlier ``path``
    untouched and raises ``OSError`` naming ``path``. ``fault_point`` names a
    :mod:`specbench.store.faults` point reached with half the data written (for kill tests)."""
    path = Path(path)
    data = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    except OSError as exc:
        raise OSError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            if fault_point:
                from specbench.store import faults
                f.write(data[:len(data) // 2])
                f.flush()
                faults.point(fault_point)
                f.write(data[len(data) // 2:])
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, f"could not write {path}: {exc.strerror or exc}") from exc
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
        self._guard()
        atomic_write(self.path / "parts" / f"{key}.json", json.dumps(record, indent=1),
                     fault_point="during-part-write")

    def discard_partial_writes(self) -> list[Path]:
        """Remove the temporary files a killed writer left (never a finished file)."""
        self._guard()
        stale = [p for p in self.path.rglob(f".*{TMP_SUFFIX}") if p.is_file()]
        for p in stale:
            p.unlink()
        return stale

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
        """Mark the run complete, record each table's checksum (so a reader detects a table
        truncated or edited later) and make every file in it read-only."""
        self.discard_partial_writes()
        files = {p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size}
                 for p in sorted(self.path.glob("*.csv"))}
        self.update_manifest(status="complete", finished_at=now_iso(), files=files)
        for p in self.path.rglob("*"):
            if p.is_file():
                p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    # -- reading ------------------------------------------------------------------------
    def table(self, name: str) -> pd.DataFrame:
        if name not in self._tables:
            path = self.path / name
            if not path.exists():
                raise RunSchemaError(f"{path}: missing — the run {self.path} has no {name}"
                                     + ("" if self.complete else " (it was never finished)"))
            # First: its errors name the column at fault.
            frame = read_table(path, self.manifest.get("kind"))
            expected = self.manifest.get("files", {}).get(name)
            if expected and sha256_file(path) != expected["sha256"]:
                raise RunSchemaError(
                    f"{path}: changed since the run closed ({path.stat().st_size} bytes, the "
                    f"manifest's files/{name} records {expected['bytes']}; truncated or edited)")
            self._tables[name] = frame
        return self._tables[name]


def read_table(path: Path, kind: str | None = None) -> pd.DataFrame:
    """Read one of the run tables and check its columns, naming the file and column: every
    column a reader relies on is present, numeric where it should be, and filled where it must
    be (a truncated table is refused, never read as a shorter one). Tables whose name two run
    kinds share are checked against the columns of the run's ``kind``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except IsADirectoryError as exc:
        raise RunSchemaError(f"{path}: a folder, not a CSV table") from exc
    if raw and not raw.endswith(b"\n"):
        raise RunSchemaError(f"{path}: truncated (the last line ends without a newline)")
    try:
        with warnings.catch_warnings():
            # a row longer than the header: pandas warns and drops data; refuse it instead
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(io.BytesIO(raw), index_col=False)
    except (pd.errors.ParserError, pd.errors.ParserWarning, pd.errors.EmptyDataError,
            UnicodeDecodeError) as exc:
        raise RunSchemaError(f"{path}: not a readable CSV table ({exc})") from exc
    for column in TABLE_COLUMNS.get(f"{kind}/{path.name}", TABLE_COLUMNS.get(path.name, [])):
        if column not in frame.columns:
            raise RunSchemaError(f"{path}: missing column {column!r}")
    known = TABLE_COLUMNS.get(f"{kind}/{path.name}", TABLE_COLUMNS.get(path.name))
    numeric = set(known or []) - TEXT_COLUMNS
    if known is not None:  # tables this module knows; others (e.g. samples.csv) are free-form
        numeric |= {"gamma", "batch", "pot_ms", "ttft_ms", "n_reps", "rep", "output_tokens",
                    "wall_ms", "compute_ms", "self_ms", "tokens"} & set(frame.columns)
    for column in sorted(numeric):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = values.isna() & frame[column].notna()
        if bad.any():
            row = int(bad.idxmax())
            raise RunSchemaError(f"{path}: column {column!r} row {row + 2} is not a number: "
                                 f"{frame[column][row]!r}")
        frame[column] = values  # numeric even when empty (a sweep whose every cell failed)
    required = [(c, frame.index) for c in REQUIRED_VALUES.get(path.name, [])]
    if path.name == "cells.csv":
        bad_status = ~frame["status"].isin(["ok", "failed"])
        if bad_status.any():
            row = int(bad_status.idxmax())
            raise RunSchemaError(f"{path}: column 'status' row {row + 2} is "
                                 f"{frame['status'][row]!r}, expected 'ok' or 'failed'")
        ok = frame.index[frame["status"] == "ok"]
        required += [(c, ok) for c in OK_CELL_VALUES]
    for column, rows in required:
        empty = frame.loc[rows, column].isna()
        if empty.any():
            row = int(empty.idxmax())
            raise RunSchemaError(f"{path}: column {column!r} row {row + 2} is empty "
                                 "(a truncated or damaged table)")
    return frame


def _read_manifest(path: Path) -> dict:
    file = path / "manifest.json"
    try:
        manifest = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunSchemaError(f"{file}: not valid JSON ({exc})") from exc
    try:
        _validate_manifest(manifest)
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
    manifest = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "running",
                "started_at": started, "finished_at": None, **manifest}
    _validate_manifest(manifest)
    # The folder appears under its name only with its manifest in it: it is made under a
    # hidden name (which readers ignore) and renamed, so no kill leaves a manifest-less run.
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{run_id}.", suffix=TMP_SUFFIX))
    try:
        atomic_write(staging / "manifest.json", json.dumps(manifest, indent=2))
        staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if os.environ.get(RUN_RECORD_ENV):
        atomic_write(Path(os.environ[RUN_RECORD_ENV]), str(path.resolve()))
    return Run(path, manifest)


def open_run(path: Path) -> Run:
    """Open an existing run folder (validated)."""
    path = Path(path)
    if not (path / "manifest.json").exists():
        raise FileNotFoundError(f"{path}: no manifest.json — not a run folder")
    return Run(path, _read_manifest(path))


def _run_folders(root: Path) -> list[Path]:
    """Every ``<sku>/<run-id>/`` folder under ``root``; hidden names (a run being created,
    editor or OS files) are not runs."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such run store folder")
    return sorted(p for sku in root.iterdir() if sku.is_dir() and not sku.name.startswith(".")
                  for p in sku.iterdir() if p.is_dir() and not p.name.startswith("."))


def scan_runs(root: Path = DEFAULT_ROOT) -> list[tuple[Path, Run | None, Exception | None]]:
    """Every run folder under ``root`` with its run, or the error that keeps it from opening
    (for listing a store that may hold damaged runs)."""
    found = []
    for folder in _run_folders(root):
        try:
            found.append((folder, open_run(folder), None))
        except (RunSchemaError, FileNotFoundError) as exc:
            found.append((folder, None, exc))
    return found


def load_runs(root: Path = DEFAULT_ROOT, kind: str | None = None,
              include_incomplete: bool = False) -> list[Run]:
    """All runs under ``root`` (every SKU), oldest first.

    A damaged run (a folder without manifest, a manifest that is not JSON or lacks a field)
    raises :class:`RunSchemaError` naming the file and field: figures are never drawn from a
    store with a hole in it. An incomplete run (never closed: still running or killed) is
    skipped with an :class:`IncompleteRunWarning` naming it, unless ``include_incomplete``."""
    runs = []
    for folder in _run_folders(root):
        if not (folder / "manifest.json").is_file():
            raise RunSchemaError(f"{folder / 'manifest.json'}: missing — {folder} is not a "
                                 "run folder (move it out of the run store)")
        run = open_run(folder)
        if kind and run.manifest["kind"] != kind:
            continue
        if run.complete or include_incomplete:
            runs.append(run)
        else:
            warnings.warn(f"{folder}: incomplete run (status 'running', never closed) skipped; "
                          f"finish it with `specbench sweep --resume {folder}`"
                          if run.manifest["kind"] in ("sweep", "draft-sweep") else
                          f"{folder}: incomplete {run.manifest['kind']} run skipped",
                          IncompleteRunWarning, stacklevel=2)
    return sorted(runs, key=lambda r: r.manifest["started_at"])
