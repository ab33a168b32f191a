"""NVIDIA Nsight Systems for the GPU host floor: the paper's method.

:func:`nsys_command` traces the whole vLLM process tree; "compute" is the summed GPU kernel
time, read from ``nsys stats`` CSV (:func:`read_kernel_summary_csv`) or the SQLite export
(:func:`read_kernel_sqlite`).

Three traps, each handled in :func:`run_nsys` (and tested with a stand-in ``nsys``):

* ``nsys stats`` exports the report to SQLite next to it and, *unless* ``--force-export=true``,
  silently reuses an existing export — so two profiles under one report name would both read
  the first one's kernels. Every profile gets its own report name, stale files are removed
  first, and the export is forced.
* nsys prints its own lines on stdout, interleaved with the profiled program's: the child's
  result travels through a file, never the last stdout line.
* Under nsys vLLM's worker processes should be spawned, not forked
  (``VLLM_WORKER_MULTIPROC_METHOD=spawn``).
"""
from __future__ import annotations

import csv
import io
import math
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

__all__ = ["NsysFormatError", "nsys_available", "nsys_command", "nsys_stats_command",
           "read_kernel_summary_csv", "read_kernel_sqlite", "run_nsys", "NSYS_ENV"]

KERNEL_REPORTS = ("cuda_gpu_kern_sum", "gpukernsum")   # current name, then older nsys's
# Environment of a profiled vLLM process tree.
NSYS_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}


class NsysFormatError(ValueError):
    """An nsys report that cannot be read; the message names the file."""


def nsys_available() -> bool:
    return shutil.which("nsys") is not None


def nsys_command(output: str, command: list[str]) -> list[str]:
    """Trace a vLLM process tree: the EngineCore runs in a child process, and CUDA graphs (if
    any) are traced node by node."""
    return ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--trace-fork-before-exec=true",
            "--cuda-graph-trace=node", "--force-overwrite=true", "-o", output, *command]


def nsys_stats_command(report: str, prefix: str, legacy: bool = False) -> list[str]:
    """Kernel summary as CSV (``cuda_gpu_kern_sum``; ``gpukernsum`` on older nsys), written to
    ``<prefix>_<report>.csv``, from a fresh SQLite export (``--force-export=true``)."""
    name = KERNEL_REPORTS[1] if legacy else KERNEL_REPORTS[0]
    return ["nsys", "stats", "--force-export=true", "--report", name, "--format", "csv",
            "--output", prefix, report]


def read_kernel_summary_csv(path: Path) -> float:
    """Total GPU kernel time in ms from an ``nsys stats`` kernel-summary CSV (either report)."""
    path = Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise NsysFormatError(f"{path}: not a text CSV ({exc})") from exc
    # nsys may print notices before the header; the table starts at the 'Time' column header.
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Total Time" in line), None)
    if start is None:
        raise NsysFormatError(f"{path}: no 'Total Time (ns)' column — not an nsys kernel "
                              "summary (cuda_gpu_kern_sum or gpukernsum)")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    rows = list(reader)
    column = next((c for c in reader.fieldnames or [] if c and c.startswith("Total Time")),
                  None)
    if column is None:
        raise NsysFormatError(f"{path}: line {start + 1}: no column named 'Total Time (ns)' "
                              "in the header")
    if not rows:
        raise NsysFormatError(f"{path}: the kernel summary has no rows")
    total = 0.0
    for n, row in enumerate(rows, start=start + 2):
        try:
            value = float(row[column])
        except (TypeError, ValueError) as exc:
            raise NsysFormatError(f"{path}: line {n}: {column!r} is not a number: "
                                  f"{row[column]!r}") from exc
        if not math.isfinite(value) or value < 0:
            raise NsysFormatError(f"{path}: line {n}: {column!r} is {row[column]!r}, not a "
                                  "time >= 0")
        total += value
    scale = 1e-6 if "(ns)" in column else (1e-3 if "(us)" in column else 1.0)
    return total * scale


def read_kernel_sqlite(path: Path) -> float:
    """Total GPU kernel time in ms from an nsys SQLite export."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such nsys SQLite export")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            (total,) = db.execute(
                "SELECT COALESCE(SUM(k.end - k.start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.shortName").fetchone()
    except sqlite3.DatabaseError as exc:
        raise NsysFormatError(f"{path}: not an nsys SQLite export with "
                              f"CUPTI_ACTIVITY_KIND_KERNEL and StringIds ({exc})") from exc
    return total / 1e6


def _remove_stale(output: Path) -> None:
    for stale in [output.with_name(output.name + ext) for ext in (".nsys-rep", ".sqlite")] + \
            list(output.parent.glob(output.name + "_*.csv")):
        stale.unlink(missing_ok=True)


def run_nsys(output: Path, command: list[str], result_file: Path) -> tuple[float, dict]:
    """Run ``command`` under nsys as report ``output`` (a name of its own); return its total
    kernel time in ms and the JSON the command wrote to ``result_file``."""
    output, result_file = Path(output), Path(result_file)
    _remove_stale(output)
    result_file.unlink(missing_ok=True)
    done = subprocess.run(nsys_command(str(output), command), capture_output=True, text=True,
                          env={**os.environ, **NSYS_ENV})
    if done.returncode != 0:
        raise RuntimeError(f"nsys profile -o {output} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout)[-2000:]}")
    report = output.with_name(output.name + ".nsys-rep")
    if not report.exists():
        raise NsysFormatError(f"{report}: nsys profile wrote no report")
    try:
        result = json.loads(result_file.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{result_file}: the profiled child left no result ({exc}); its "
                           f"output: {(done.stderr or done.stdout)[-2000:]}") from exc
    return _kernel_ms(report, output), result


def _kernel_ms(report: Path, output: Path) -> float:
    """Kernel total of one report through ``nsys stats`` (the older report name if needed)."""
    prefix = str(output) + "_kern"
    errors = []
    for legacy, name in enumerate(KERNEL_REPORTS):
        stats = subprocess.run(nsys_stats_command(str(report), prefix, legacy=bool(legacy)),
                               capture_output=True, text=True)
        summary = Path(f"{prefix}_{name}.csv")
        if stats.returncode == 0 and summary.exists():
            return read_kernel_summary_csv(summary)
        errors.append(f"{name}: rc {stats.returncode} {stats.stderr.strip()[-500:]}")
    raise NsysFormatError(f"{report}: nsys stats wrote no kernel summary "
                          f"({'; '.join(errors)})")
