"""An operator's own prompts as a workload: a JSONL file in vLLM's custom-dataset format.

One JSON object per line with a ``prompt`` string and an optional ``output_tokens`` (a whole
number ≥ 2, which wins over the sweep's ``max_tokens`` for its line). The chat template is
applied as vLLM's custom dataset applies it: one user message and the generation prompt. The
workload is named ``file:<path>``; the run records the file's SHA-256 and line count, and —
these being someone's traffic — output hashes rather than output token ids.

:func:`read_prompts` checks the whole file before any engine starts: a malformed line, a
missing ``prompt`` or an empty file is an error naming the file and line.
"""
from __future__ import annotations

import json
from pathlib import Path

from specbench.store.runs import sha256_file
from specbench.measure.workloads.builtin import Request

__all__ = ["FileSource", "read_prompts", "json_lines"]


def json_lines(path: Path):
    """(line number, JSON object) for every non-blank line; a line that is not a JSON object
    is an error naming the file and line."""
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}, line {number}: not valid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object")
        yield number, row


def read_prompts(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: workload file not found")
    rows = []
    for number, row in json_lines(path):
        if not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ValueError(f"{path}, line {number}: field 'prompt' missing or not a "
                             "non-empty string")
        out = row.get("output_tokens")
        if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 2):
            raise ValueError(f"{path}, line {number}: field 'output_tokens' must be a whole "
                             f"number >= 2, got {out!r}")
        rows.append({"line": number, "prompt": row["prompt"], "output_tokens": out})
    if not rows:
        raise ValueError(f"{path}: no prompt in the file (empty workload)")
    return rows


class FileSource:
    """Prompts from an operator's file, in file order."""
    store_outputs = False

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.name = f"file:{self.path}"
        self._rows = read_prompts(self.path)

    def candidates(self) -> list[Request]:
        return [Request(f"line{r['line']}", ({"role": "user", "content": r["prompt"]},),
                        max_tokens=r["output_tokens"]) for r in self._rows]

    def sampling(self) -> dict:
        return {"temperature": 0.0, "repetition_penalty": 1.0}

    def describe(self) -> dict:
        return {"source": "file", "name": self.name, "file": self.path.name,
                "file_sha256": sha256_file(self.path), "lines": len(self._rows),
                "chat_template": "one user message, generation prompt added"}
