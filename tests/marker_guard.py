"""A test that reads the committed run store or the built book carries the marker that selects
it — `data` for runs/, `book` or `browser` for _build/ — so `make test-fast` (which deselects
them) never depends on what a fresh clone lacks, and never passes by reading what it should not.

A test without the marker that opens or lists a file there fails, naming the path and the
marker it needs. In-process reads are caught by an audit hook (``sys.addaudithook``: open,
listdir, scandir); child processes (the command line, notebook kernels) get $SPECBENCH_RUNS and
$SPECBENCH_BOOK_BUILD pointing where nothing can be read or written, so they fail too.
"""
from __future__ import annotations

import os
import sys
import threading
import traceback
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EVENTS = {"open", "os.listdir", "os.scandir"}
# Where nothing exists and nothing can be created, even by root: a path under a device file.
NOWHERE = "/dev/null/read-by-a-test-without-its-marker"


def _guarded() -> list[tuple[str, tuple[str, ...]]]:
    """(folder, markers that allow reading it); the run store first, since make test keeps
    its copy of the committed store under _build/."""
    runs = {ROOT / "runs", Path(os.environ.get("SPECBENCH_RUNS", ROOT / "runs"))}
    builds = {ROOT / "_build", Path(os.environ.get("SPECBENCH_BOOK_BUILD", ROOT / "_build"))}
    return ([(str(p.resolve()), ("data",)) for p in runs]
            + [(str(p.resolve()), ("book", "browser")) for p in builds])


GUARDED = _guarded()
_reads: list[tuple[str, tuple[str, ...], str]] = []   # (path, allowing markers, reader)
_watching = [False]
_fixture_reads: dict = {}   # fixture definition -> its setup's first guarded read


def _audit(event: str, args: tuple) -> None:
    if not _watching[0] or event not in EVENTS or not args \
            or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    name = os.fsdecode(args[0])
    path = os.path.abspath(name)
    for folder, markers in GUARDED:
        if path == folder or path.startswith(folder + os.sep):
            if not os.path.isabs(name) and _deleting():
                return
            _reads.append((path, markers, _reader()))
            return


def _deleting() -> bool:
    """A relative name opened while a tree is deleted: shutil.rmtree opens each folder by its
    name relative to its parent's descriptor (dir_fd), so a folder called "runs" anywhere — as
    pytest clears a --basetemp left by an earlier session — looks like <cwd>/runs. Not a read."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name.startswith("_rmtree") and "shutil" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _reader() -> str:
    """Who read: the thread and the innermost frames outside this file, so a failure names the
    line to fix (a fixture's read, a library's, a background thread's)."""
    frames = [f for f in traceback.extract_stack() if f.filename != __file__][-6:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"thread {threading.current_thread().name}: {where}"


sys.addaudithook(_audit)


def _marks(item: pytest.Item) -> set[str]:
    return {m.name for m in item.iter_markers()}


def _watch(item: pytest.Item) -> dict:
    """Start recording reads; the environment child processes would read is redirected."""
    marks = _marks(item)
    saved = {k: os.environ.get(k) for k in ("SPECBENCH_RUNS", "SPECBENCH_BOOK_BUILD")}
    if "data" not in marks:
        os.environ["SPECBENCH_RUNS"] = NOWHERE
    if not marks.intersection(("book", "browser")):
        os.environ["SPECBENCH_BOOK_BUILD"] = NOWHERE
    _reads.clear()
    _watching[0] = True
    return saved


def _stop(item: pytest.Item, saved: dict) -> None:
    """Stop recording; fail when the test, or a fixture it uses (set up now or earlier, for
    another test), read a guarded folder the test's markers do not allow."""
    _watching[0] = False
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    info = getattr(item, "_fixtureinfo", None)
    used = [d for defs in (info.name2fixturedefs.values() if info else ()) for d in defs]
    reads = _reads + [_fixture_reads[d] for d in used if d in _fixture_reads]
    _reads.clear()
    missing = [(path, markers, reader) for path, markers, reader in reads
               if not _marks(item).intersection(markers)]
    if missing:
        path, markers, reader = missing[0]
        pytest.fail(f"{item.nodeid} reads {path} (itself or through a fixture) without the "
                    f"marker {' or '.join(markers)}: mark it, so `make test-fast` deselects "
                    f"it (read by {reader})", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = len(_reads)
    try:
        return (yield)
    finally:
        if len(_reads) > start:
            _fixture_reads.setdefault(fixturedef, _reads[start])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    saved = _watch(item)
    try:
        return (yield)
    finally:
        _stop(item, saved)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    saved = _watch(item)
    try:
        return (yield)
    finally:
        _stop(item, saved)
