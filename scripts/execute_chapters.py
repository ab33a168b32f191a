#!/usr/bin/env python
"""Execute the book's chapters several at a time into Jupyter Book's execution cache.

myst-nb executes a book's notebooks one after another, so on a 2-core machine one core idles
through the whole build. This runs them first, ``--jobs`` at a time, longest first (each
chapter's seconds from the last build), and stores each executed chapter in the cache exactly as
myst-nb would: read by myst-nb's own reader, executed by jupyter-cache's ``single_nb_execution``
in the chapter's folder, stored under the hash myst-nb looks up. The build that follows then
finds every chapter executed. A chapter that fails here is not stored: the build executes it
again and reports its error as it always has.

Usage: execute_chapters.py CACHE_DIR [--jobs N] [--timeout S] [--book DIR]
(scripts/build_book.sh calls it)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import yaml
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution
from myst_nb.core.read import is_myst_markdown_notebook, myst_nb_reader_plugin

ROOT = Path(__file__).resolve().parents[1]
EXECUTED_BY = "scripts/execute_chapters.py"   # in each record this stores (tests read it)
TIMINGS = "chapter-seconds.json"   # beside the cache: each chapter's seconds in the last run


def chapters(book: Path) -> list[Path]:
    """The toc's root and chapters that are MyST notebooks (a page without code is not run)."""
    spec = yaml.safe_load((book / "_toc.yml").read_text())
    files = [spec["root"]] + [c["file"] for c in spec.get("chapters", [])]
    paths = [book / f"{name}.md" for name in files]
    return [p for p in paths if p.is_file() and is_myst_markdown_notebook(p.read_text("utf8"))]


def execute(path: Path, timeout: int):
    """(path, executed notebook or None, seconds, error line): in a worker process."""
    notebook = myst_nb_reader_plugin(str(path))
    result = single_nb_execution(notebook, cwd=str(path.parent), timeout=timeout,
                                 allow_errors=False, meta_override=True)
    error = f"{type(result.err).__name__}: {result.err}" if result.err else None
    return path, (None if error else notebook), result.time, error


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cache", type=Path, help="Jupyter Book's execution cache folder")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="chapters executed at once (default: the CPUs, %(default)s)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may take")
    parser.add_argument("--book", type=Path, default=ROOT,
                        help="the book's folder, with its _toc.yml (default: this checkout)")
    args = parser.parse_args(argv)
    cache = get_cache(args.cache)
    pending = []
    book = args.book.resolve()
    for path in chapters(book):
        try:
            cache.match_cache_notebook(myst_nb_reader_plugin(str(path)))
        except KeyError:
            pending.append(path)
    timings_file = args.cache.parent / TIMINGS
    last = json.loads(timings_file.read_text()) if timings_file.is_file() else {}
    pending.sort(key=lambda p: -last.get(p.name, 0.0))   # longest first: the shortest finish
    seconds, started = dict(last), time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(execute, path, args.timeout) for path in pending]
        for future in as_completed(futures):
            path, notebook, took, error = future.result()
            seconds[path.name] = took
            if error:   # the build executes it again and shows the traceback
                print(f"{path.relative_to(book)}: failed ({error.splitlines()[0]})",
                      file=sys.stderr)
                continue
            cache.cache_notebook_bundle(
                CacheBundleIn(notebook, str(path), data={"execution_seconds": took,
                                                  "executed_by": EXECUTED_BY}),
                check_validity=False, overwrite=True)
            print(f"{path.relative_to(book)}: executed in {took:.1f} s", file=sys.stderr)
    timings_file.write_text(json.dumps(seconds, indent=1, sort_keys=True))
    print(f"{len(pending)} chapters in {time.perf_counter() - started:.1f} s, "
          f"{args.jobs} at a time", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
