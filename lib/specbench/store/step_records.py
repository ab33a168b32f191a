"""Reading the step records an engine wrote (:mod:`specbench.engine.step_records` writes them).

The format is a contract between two layers that may not import each other (the store is file
I/O only, the engine knows nothing of the store): both name :data:`FORMAT`, :data:`VERSION`
and :data:`FIELDS`, and tests/test_step_records.py holds the two definitions equal.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

__all__ = ["FORMAT", "VERSION", "FIELDS", "VERSION_FIELDS", "read_step_records"]

FORMAT = "specbench-step-records"
VERSION = 2
FIELDS = ("step", "t_start_ns", "t_end_ns", "rows", "decode_tokens", "draft_tokens",
          "draft_padded", "prefill_tokens", "context_tokens", "gamma", "overhead_ns",
          "decode_pairs", "prefill_pairs")
#: The fields of each version still read: version 1 (before 2026-12-07) has no attention pairs,
#: and its frames have no such columns (the step-time model leaves their terms out).
VERSION_FIELDS = {1: FIELDS[:FIELDS.index("decode_pairs")], 2: FIELDS}


def _parse(path: Path, number: int, line: str, keys) -> dict:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: line {number}: not JSON ({exc.msg}): a damaged step-record "
                         "file") from None
    if not isinstance(value, dict) or not set(keys) <= set(value):
        missing = sorted(set(keys) - set(value)) if isinstance(value, dict) else list(keys)
        raise ValueError(f"{path}: line {number}: missing {', '.join(missing)}: a damaged "
                         "step-record file")
    return value


def read_step_records(path) -> pd.DataFrame:
    """One row per recorded step (columns: its version's fields, :data:`VERSION_FIELDS`, plus
    ``duration_ns``); the header's fields in ``frame.attrs``. A damaged file raises a one-line
    ``ValueError`` naming the file and the line."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise ValueError(f"{path}: line 1: empty, no step-record header")
    header = _parse(path, 1, lines[0], ("format", "version", "fields"))
    fields = VERSION_FIELDS.get(header["version"])
    if header["format"] != FORMAT or fields is None:
        raise ValueError(f"{path}: line 1: format {header['format']!r} version "
                         f"{header['version']!r}, expected {FORMAT!r} version "
                         f"{' or '.join(map(str, VERSION_FIELDS))}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        record = _parse(path, number, line, fields)
        bad = [k for k in fields if type(record[k]) is not int or record[k] < 0]
        if bad:
            raise ValueError(f"{path}: line {number}: {bad[0]}={record[bad[0]]!r} is not a "
                             "count: a damaged step-record file")
        if record["step"] != len(rows) or record["t_end_ns"] < record["t_start_ns"]:
            raise ValueError(f"{path}: line {number}: step {record['step']} out of order "
                             f"(expected {len(rows)}, start before end): a damaged step-record "
                             "file")
        rows.append([record[k] for k in fields])
    frame = pd.DataFrame(rows, columns=list(fields), dtype="int64")
    frame["duration_ns"] = frame["t_end_ns"] - frame["t_start_ns"]
    frame.attrs.update(header, path=str(path))
    return frame
