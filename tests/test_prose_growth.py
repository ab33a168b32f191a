"""Prose does not grow with the store (issue 38, item 2): a store with three more SKUs renders
the front pages and the chapters that quote every SKU within a few words of the committed one.

A page's prose is its markdown, outside code, folded notes, math and headings, with each
glued value put in: the glued values are the only part of the prose that depends on the
store, so the values each chapter's ``numbers`` computes from a store, formatted as the page
formats them, are what a build from that store would print. That renders a page in seconds,
where executing its notebook and building the book would take minutes. The extra SKUs are an
existing SKU's sweeps and microbenchmarks copied under new SKU ids, with other thread counts
(so other labels) and later start times, as a new machine's `make book` would add them.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jupytext
import pytest
from specbench.report.chapters import (
    acceptance,
    host_floor,
    index,
    measured,
    regimes,
    story,
)
from test_prose import count_words

pytestmark = pytest.mark.data

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"index": index.numbers, "story": story.numbers, "regimes": regimes.numbers,
         "acceptance": acceptance.numbers, "host_floor": host_floor.numbers,
         "measured": measured.numbers}
COPIED_SKU = "cpu-amd-epyc-f26m2-1t-float32"
EXTRA_THREADS = (3, 4, 8)
#: Words a page may differ by: a count that gains a digit, a label one word longer.
SLACK_WORDS = 3

GLUE = re.compile(r"\{glue(?::text)?\}`([^`:]+)(?::([^`]*))?`")
DOC = re.compile(r"\{doc\}`(?:([^`<]*?)\s*<[^`>]*>|([^`]*))`")
NOT_PROSE_BLOCK = re.compile(r"^(```|:::|\$\$)")


def grow(store: Path, into: Path) -> Path:
    """``store`` with three more SKUs: copies of one SKU's sweeps and microbenchmarks."""
    shutil.copytree(store, into)
    for path in [into, *into.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    for i, threads in enumerate(EXTRA_THREADS):
        sku = COPIED_SKU.replace("-1t-", f"-{threads}t-")
        for run in sorted((into / COPIED_SKU).iterdir()):
            manifest = json.loads((run / "manifest.json").read_text())
            if manifest["kind"] not in ("sweep", "microbench"):
                continue
            run_id = f"{manifest['run_id'][:-6]}{i:06x}"
            copy = into / sku / run_id
            shutil.copytree(run, copy)
            manifest.update(run_id=run_id, sku=sku, started_at="2027" + manifest["started_at"][4:])
            manifest["hardware"]["threads"] = threads
            (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return into


def prose_words(page: str, values: dict) -> int:
    """Words of the page's prose with the glued values put in."""
    words = 0
    for cell in jupytext.read(ROOT / "book" / f"{page}.md").cells:
        if cell.cell_type != "markdown":
            continue
        inside = None
        for line in cell.source.splitlines():
            fence = NOT_PROSE_BLOCK.match(line.strip())
            if inside:
                inside = None if fence and line.strip().startswith(inside) else inside
                continue
            if fence:
                inside = fence.group(1)
                continue
            if line.startswith("#"):
                continue
            text = GLUE.sub(lambda m: format(values[m.group(1)], m.group(2) or ""), line)
            words += count_words(DOC.sub(lambda m: m.group(1) or m.group(2), text))
    return words


def glued(numbers) -> dict:
    """The names a chapter's ``glue_all`` glues: its values and its run lists."""
    runs = {"runs": ", ".join(numbers.runs)}
    runs.update({f"{kind}_runs": ", ".join(r for r in numbers.runs if r.startswith(kind + "-"))
                 for kind in ("sweep", "hostfloor")})
    return {**numbers.values, **runs}


@pytest.fixture(scope="module")
def grown(committed_store, tmp_path_factory) -> Path:
    return grow(committed_store, tmp_path_factory.mktemp("grown") / "runs")


@pytest.mark.parametrize("page", list(PAGES))
def test_prose_does_not_grow_with_the_store(page, committed_store, grown):
    n_before = prose_words(page, glued(PAGES[page](committed_store)))
    n_after = prose_words(page, glued(PAGES[page](grown)))
    assert abs(n_after - n_before) <= SLACK_WORDS, (
        f"{page}: {n_before} prose words from the committed store, {n_after} with "
        f"{len(EXTRA_THREADS)} more SKUs: a sentence enumerates SKUs")


def test_the_grown_store_has_the_extra_skus(grown, committed_store):
    from specbench.derive.analysis import sweep_cells
    assert (sweep_cells(grown)["sku"].nunique()
            == sweep_cells(committed_store)["sku"].nunique() + len(EXTRA_THREADS))
