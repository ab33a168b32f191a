"""A chapter's executed outputs, as the book build computed them, in a stable comparable form.

`make test` executes each chapter once, in the book build (myst-nb with jupyter-cache); the
references in tests/nbval/ are that build's outputs for the committed run store
(`make references`), and tests/test_chapter_outputs.py compares the two. One execution path for
both, so a reference can never disagree with the book for a reason the book does not have.
"""
from __future__ import annotations

import configparser
import math
import os
import re
from collections import defaultdict
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT / "tests" / "nbval"
SANITIZE = REFERENCES / "sanitize.cfg"
# Never compared: images (the chart's spec digest is), ids and execution metadata.
DROPPED_MIME = ("image/png", "image/jpeg")
SKIP_KEYS = {"metadata", "traceback", "execution_count", "output_type", "name",
             "application/vnd.jupyter.widget-view+json", *DROPPED_MIME}
IGNORE_OUTPUT = "NBVAL_IGNORE_OUTPUT"   # a cell whose output is timing or otherwise volatile
# Recorded numbers are compared within this relative tolerance: numpy's summation rounds
# differently on another CPU (a Zen 3 gave 9.341246887026797 where the references, written on a
# Zen 4, say 9.341246887026799), and the suite judges results, not CPUs. A change in the ninth
# significant digit is a changed result; one in the last bit is not.
REL_TOL = 1e-9
ABS_TOL = 1e-12          # values that should be 0 and come out as ±1e-17 on another CPU
NUMBER = re.compile(r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)")


def book_build() -> Path:
    """The book's build folder (`_build`, or where `make test` renders: $SPECBENCH_BOOK_BUILD)."""
    return Path(os.environ.get("SPECBENCH_BOOK_BUILD", ROOT / "_build"))


def chapters() -> list[Path]:
    return sorted(p for p in (ROOT / "book").glob("*.md")
                  if p.read_text().startswith("---\njupytext:"))


def sanitize_patterns(path: Path = SANITIZE) -> list[tuple[re.Pattern, str]]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(path)
    return [(re.compile(config[s]["regex"]), config[s]["replace"]) for s in config.sections()]


def _clean(value, patterns):
    text = "".join(value) if isinstance(value, list) else value
    for regex, replace in patterns:
        text = regex.sub(replace, text)
    return text


def executed(chapter: Path, build: Path | None = None) -> nbformat.NotebookNode:
    """The chapter with the outputs the build's execution cache holds for its current code.
    Raises LookupError when the build did not execute this version of the chapter."""
    from jupyter_cache import get_cache
    cache_dir = (build or book_build()) / ".jupyter_cache"
    if not cache_dir.is_dir():
        raise LookupError(f"{cache_dir}: no execution cache — build the book first "
                          "(`make book-from-runs`, or `make test`)")
    notebook = jupytext.read(chapter)
    try:
        _, merged = get_cache(cache_dir).merge_match_into_notebook(notebook)
    except KeyError as exc:
        raise LookupError(f"{chapter.name}: the build in {cache_dir.parent} did not execute "
                          "this version of the chapter (it failed, or the chapter changed "
                          "since): rebuild the book") from exc
    return merged


def strip(notebook, patterns) -> nbformat.NotebookNode:
    """The executed notebook without ids, execution metadata and images; outputs sanitized."""
    notebook.nbformat, notebook.nbformat_minor = 4, 4
    notebook.metadata = {"kernelspec": notebook.metadata.get("kernelspec", {})}
    for cell in notebook.cells:
        cell.pop("id", None)
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
        if cell.cell_type != "code":
            continue
        cell.execution_count = None
        outputs = []
        for output in cell.outputs:
            output.pop("execution_count", None)
            if "metadata" in output:
                output["metadata"] = {}
            if "data" in output:
                output["data"] = {mime: (_clean(v, patterns) if isinstance(v, (str, list))
                                         else v)
                                  for mime, v in output["data"].items() if mime not in DROPPED_MIME}
            if "text" in output:
                output["text"] = _clean(output["text"], patterns)
            outputs.append(output)
        cell.outputs = _coalesce_streams(outputs)
    return notebook


def _coalesce_streams(outputs: list) -> list:
    """One output per stream name, in first-seen order (how output is chunked is not content)."""
    merged, streams = [], {}
    for output in outputs:
        if output.get("output_type") == "stream":
            text = "".join(output["text"]) if isinstance(output["text"], list) else output["text"]
            if output["name"] in streams:
                streams[output["name"]]["text"] += text
                continue
            output = nbformat.from_dict({**output, "text": text})
            streams[output["name"]] = output
        merged.append(output)
    return merged


def comparable(cell) -> dict[str, list]:
    """A code cell's outputs as {field or MIME type: [values in order]} (nbval's flattening:
    the order of different kinds of output does not matter, the order within one kind does)."""
    flat: dict[str, list] = defaultdict(list)
    for output in _coalesce_streams(cell.outputs):
        if output.get("output_type") == "stream":
            flat[f"stream:{output['name']}"].append(output["text"])
            continue
        for key, value in output.items():
            if key == "data":
                for mime, data in value.items():
                    if mime not in SKIP_KEYS:
                        flat[mime].append(data)
            elif key not in SKIP_KEYS:
                flat[key].append(value)
    return dict(flat)


def _same_text(mine: str, theirs: str) -> bool:
    """Equal text, with every number in it equal within :data:`REL_TOL`."""
    if mine == theirs:
        return True
    mine_parts, their_parts = NUMBER.split(mine), NUMBER.split(theirs)
    if len(mine_parts) != len(their_parts):
        return False
    # re.split with one group alternates text (even positions) and numbers (odd positions).
    for i, (a, b) in enumerate(zip(mine_parts, their_parts, strict=True)):
        if i % 2 == 0 and a != b:
            return False
        if i % 2 == 1 and a != b and not math.isclose(float(a), float(b), rel_tol=REL_TOL,
                                                      abs_tol=ABS_TOL):
            return False
    return True


def _lines(value) -> bool:
    """A list of text lines, as nbformat may store one output's text."""
    return (isinstance(value, list) and all(isinstance(x, str) for x in value)
            and all(x.endswith("\n") for x in value[:-1]))


def _joined(value) -> str:
    return "".join(value) if isinstance(value, list) else value


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def same(mine, theirs) -> bool:
    """Recorded outputs equal up to :data:`REL_TOL` in every number they print."""
    if isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs):
        if all(map(same, mine, theirs)):
            return True
    # One output's text may be stored as a list of lines on one side and a string on the other.
    if isinstance(mine, (str, list)) and isinstance(theirs, (str, list)) and (
            _lines(mine) or _lines(theirs)):
        return _same_text(_joined(mine), _joined(theirs))
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return mine.keys() == theirs.keys() and all(same(mine[k], theirs[k]) for k in mine)
    if isinstance(mine, str) and isinstance(theirs, str):
        return _same_text(mine, theirs)
    if _number(mine) and _number(theirs):
        return math.isclose(mine, theirs, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return mine == theirs


def differences(test, reference) -> list[str]:
    """Where two stripped executions of one chapter differ, one line per cell."""
    test_code = [c for c in test.cells if c.cell_type == "code"]
    ref_code = [c for c in reference.cells if c.cell_type == "code"]
    if [c.source for c in test_code] != [c.source for c in ref_code]:
        return ["the chapter's code changed since its reference: run `make references`"]
    problems = []
    for number, (mine, theirs) in enumerate(zip(test_code, ref_code, strict=True), start=1):
        if IGNORE_OUTPUT in mine.source:
            continue
        got, want = comparable(mine), comparable(theirs)
        if not same(got, want):
            keys = sorted(set(got) | set(want))
            which = [k for k in keys if not same(got.get(k), want.get(k))]
            detail = "; ".join(f"{k}: {str(want.get(k))[:300]!r} → {str(got.get(k))[:300]!r}"
                               for k in which[:2])
            problems.append(f"code cell {number} ({mine.source.splitlines()[0][:60]}…): {detail}")
    return problems
