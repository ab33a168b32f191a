"""Spec-Bench prompts as a workload source, read from a path and never copied into the project.

Spec-Bench (Apache-2.0 repository) is the standard prompt set of speculative-decoding studies:
480 prompts in one JSONL file, one object per line with ``question_id``, ``category`` and
``turns``. Six categories: the MT-bench part (question ids 81–160, eight sub-categories of ten;
called ``multi-turn`` here) and ``translation``, ``summarization``, ``qa``, ``math_reasoning``,
``rag`` (80 each). As vLLM's own ``spec_bench`` dataset does, a request is the first turn only,
with the model's chat template and its generation prompt.

The choice of prompts is deterministic and spread: prompts are ordered by the SHA-256 of their
question id (not the lowest ids), and the multi-turn category takes its sub-categories in turn.
The sweep takes the first K of that order whose prompt fits the context and skips the rest.
Runs record the file's SHA-256, the category and the question ids — never the texts, and not
the output token ids either (outputs often copy the article back): only their hashes.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from itertools import chain, zip_longest
from pathlib import Path

from specbench.store.runs import REPO_ROOT, sha256_file
from specbench.measure.workloads.operator_file import json_lines
from specbench.measure.workloads.builtin import Request

__all__ = ["CATEGORIES", "SpecBenchSource", "default_path", "read_questions",
           "write_prompt_file", "nearest_in_length"]

MULTI_TURN = "multi-turn"
CATEGORIES = (MULTI_TURN, "translation", "summarization", "qa", "math_reasoning", "rag")
MT_BENCH_IDS = range(81, 161)


def default_path() -> Path:
    """$SPECBENCH_SPEC_BENCH, else ``../shared/data/spec_bench/question.jsonl`` beside the
    checkout (where the project's machines and CI keep the download)."""
    env = os.environ.get("SPECBENCH_SPEC_BENCH")
    return (Path(env) if env
            else REPO_ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl")


def read_questions(path: Path) -> list[dict]:
    """The file's records, each checked for the fields this source uses (file and line named)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: Spec-Bench question file not found. Download data/spec_bench/question.jsonl "
            "from the Spec-Bench repository (hemingkx/Spec-Bench) and pass its path, or set "
            "SPECBENCH_SPEC_BENCH")
    rows = []
    for number, row in json_lines(path):
        for field, kind in (("question_id", int), ("category", str), ("turns", list)):
            if not isinstance(row.get(field), kind):
                raise ValueError(f"{path}, line {number}: field {field!r} missing or not "
                                 f"{kind.__name__}")
        if not row["turns"] or not isinstance(row["turns"][0], str):
            raise ValueError(f"{path}, line {number}: field 'turns' has no first turn")
        rows.append(row)
    return rows


def _spread(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: hashlib.sha256(str(r["question_id"]).encode()).hexdigest())


class SpecBenchSource:
    """One Spec-Bench category as a prompt source (greedy, first turn, chat template)."""
    store_outputs = False

    def __init__(self, category: str, path: str | Path | None = None):
        if category not in CATEGORIES:
            raise ValueError(f"unknown Spec-Bench category {category!r}; choose from "
                             f"{', '.join(CATEGORIES)}")
        self.category = category
        self.name = f"specbench:{category}"
        self.path = Path(path) if path else default_path()
        self._rows = None

    def _category_rows(self) -> list[dict]:
        if self._rows is None:
            rows = read_questions(self.path)
            if self.category == MULTI_TURN:
                mine = [r for r in rows if r["question_id"] in MT_BENCH_IDS]
                subs = sorted({r["category"] for r in mine})
                # One prompt of each sub-category in turn, each sub-category in spread order.
                columns = [_spread([r for r in mine if r["category"] == s]) for s in subs]
                self._rows = [r for r in chain(*zip_longest(*columns)) if r is not None]
            else:
                self._rows = _spread([r for r in rows if r["category"] == self.category])
            if not self._rows:
                raise ValueError(f"{self.path}: no prompt of category {self.category!r}")
        return self._rows

    def candidates(self) -> list[Request]:
        return [Request(f"q{r['question_id']}", ({"role": "user", "content": r["turns"][0]},))
                for r in self._category_rows()]

    def sampling(self) -> dict:
        return {"temperature": 0.0, "repetition_penalty": 1.0}

    def describe(self) -> dict:
        return {"source": "spec_bench", "name": self.name, "category": self.category,
                "file": self.path.name, "file_sha256": sha256_file(self.path),
                "selection": "ordered by sha256(question_id); multi-turn: sub-categories in "
                             "turn; first K that fit the context",
                "turn": "first", "chat_template": "generation prompt added"}


def write_prompt_file(category: str, count: int, out: str | Path, skip: int = 0,
                      path: str | Path | None = None) -> list[int]:
    """Write ``count`` prompts of a category, after the first ``skip`` of the sweep's order (the
    ones a short sweep measures), as an operator's prompt file: vLLM's custom-dataset JSONL with
    the question id and category beside each prompt. The file is the operator's, outside the
    project (``_build/`` or a temporary folder); runs record its hash and the ids. Returns the
    question ids written."""
    source = SpecBenchSource(category, path)
    rows = source._category_rows()[skip:skip + count]
    if len(rows) < count:
        raise ValueError(f"{source.path}: category {category!r} has {len(rows)} prompts after "
                         f"the first {skip}, not {count}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps({"prompt": r["turns"][0], "question_id": r["question_id"],
                                "category": category}) + "\n")
    return [r["question_id"] for r in rows]


def nearest_in_length(category: str, path: str | Path | None = None) -> str:
    """The other category whose prompts are nearest in length to ``category``'s (median first
    turn, in characters, compared on a log scale). A serving probe that prices a step must see
    the contexts the operator's prompts will hold: a step's cost grows with the context it
    reads, and a fit on 3,000-character articles extrapolates badly to 50-character questions."""
    def median_length(name: str) -> float:
        rows = SpecBenchSource(name, path)._category_rows()
        return statistics.median(len(r["turns"][0]) for r in rows)

    own = math.log(median_length(category))
    others = [c for c in CATEGORIES if c != category]
    return min(others, key=lambda c: abs(math.log(median_length(c)) - own))
