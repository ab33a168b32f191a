"""Whole-store results computed once per store content and library code.

Every chapter of the book runs in its own kernel and most of them start from the same
whole-store analysis (the cells with their predictions, leave-one-SKU-out); the tests read the
same committed store again. :func:`memoised` wraps such a function so it is computed once per
(store content, library code, arguments): the argument named ``root`` is a run store and is
keyed by :func:`store_fingerprint` (its JSON and CSV files' paths and bytes, not its location),
a DataFrame argument by its content, any other argument by its ``repr``.

Two levels: a dict in this process, and a pickle per result on disk under
``$SPECBENCH_CACHE_DIR`` (else ``$XDG_CACHE_HOME/specbench/analysis``, else
``~/.cache/specbench/analysis``; an empty ``SPECBENCH_CACHE_DIR`` keeps results in memory only),
so one chapter's kernel hands its result to the next. A cache file that cannot be read is
ignored and the result recomputed; one that cannot be written is skipped. Warnings the function
raised are recorded with its result and raised again on every call, as the uncached function
would. Each caller gets its own deep copy, so mutating a result never changes the cache.

Memoised today: ``analysis.sweep_cells`` and ``request_predictors``,
``transfer.leave_one_sku_out``, ``tiers.tier_predictions``, ``numbers.regime_table`` and the
planner's host sessions and their microbenchmarks (``plan.gamma``). The pickles are trusted as
the user's own files: point ``SPECBENCH_CACHE_DIR`` at a folder no one else writes.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
import logging
import os
import pickle
import platform
import time
import warnings
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd

from specbench.store.runs import atomic_write

__all__ = ["memoised", "store_fingerprint", "code_fingerprint", "cache_dir", "computations",
           "clear_memory", "CACHE_ENV"]

CACHE_ENV = "SPECBENCH_CACHE_DIR"
STORE_FILES = (".json", ".csv")   # every table and manifest a reader of the store opens
MEMORY_ENTRIES = 64               # results kept in this process (a test session reads ~20 stores)
# A file whose times are this close to now may change again within the same timestamp tick:
# its store is hashed on every call until it is older.
RACY_NS = 2_000_000_000
DISK_ENTRIES = 256                # files kept on disk, newest first (each well under 1 MB)

# How many times each memoised function was actually computed in this process (not served from
# either level): what tests and measurements of the cache count.
computations: Counter = Counter()
_memory: OrderedDict = OrderedDict()
_fingerprints: dict = {}   # a store's file stats -> its fingerprint, in this process
_registries: dict = {}     # per source file: the warnings already shown (``__warningregistry__``)
_log = logging.getLogger(__name__)


def _store_files(folder: str, prefix: str = "") -> list[tuple[str, str, os.stat_result]]:
    """(relative posix name, path, stat) of every JSON and CSV file under ``folder``.

    ``os.scandir`` rather than ``Path.rglob``: a chapter asks for the fingerprint hundreds of
    times, and pathlib's parsing of a thousand paths per walk cost the book's build half its
    time (a scandir entry already knows whether it is a file or a folder)."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):   # as rglob: links to folders are not walked
                found.extend(_store_files(entry.path, name + "/"))
            elif entry.name.endswith(STORE_FILES) and entry.is_file():
                found.append((name, entry.path, entry.stat()))
    return found


def store_fingerprint(root) -> str:
    """sha256 over the sorted relative paths and bytes of the store's JSON and CSV files: the
    same for two copies of a store, different as soon as one byte of a table or manifest is.

    Some readers are called hundreds of times per chapter, so within a process the bytes are
    hashed again only when a file's size, inode or change times differ from the last hash; as
    in git's index, files changed too recently to trust their times are always hashed."""
    root = Path(root)
    files = sorted(_store_files(str(root)))
    signature = (str(root.resolve()), tuple((name, st.st_size, st.st_ino, st.st_mtime_ns,
                                             st.st_ctime_ns) for name, _, st in files))
    known = _fingerprints.get(signature)
    if known is not None:
        return known
    digest = hashlib.sha256()
    for name, path, _ in files:
        digest.update(name.encode() + b"\0")
        with open(path, "rb") as handle:
            digest.update(hashlib.sha256(handle.read()).digest())
    fingerprint = digest.hexdigest()
    newest = max((max(st.st_mtime_ns, st.st_ctime_ns) for _, _, st in files), default=0)
    if time.time_ns() - newest > RACY_NS:
        if len(_fingerprints) >= MEMORY_ENTRIES:
            _fingerprints.clear()
        _fingerprints[signature] = fingerprint
    return fingerprint


@functools.cache
def code_fingerprint() -> str:
    """sha256 over the package's Python sources and the versions that shape a result or its
    pickle (Python, numpy, pandas): a changed line anywhere in specbench is a new key."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{platform.python_version()} {np.__version__} "
                            f"{pd.__version__}".encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_dir() -> Path | None:
    """Where results are pickled, or None where the disk level is off."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return Path(configured).expanduser() if configured else None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "specbench" / "analysis"


def clear_memory() -> None:
    """Forget the in-process results and fingerprints (the disk level stays)."""
    _memory.clear()
    _fingerprints.clear()


def _frame_digest(frame: pd.DataFrame) -> str:
    """A DataFrame's content: columns, dtypes, index and values (objects by type and repr, so
    the string '1' and the integer 1 differ)."""
    digest = hashlib.sha256(repr((list(frame.columns), [str(t) for t in frame.dtypes],
                                  frame.index.names, frame.attrs)).encode())
    digest.update(pd.util.hash_pandas_object(frame.index).to_numpy().tobytes())
    for i in range(frame.shape[1]):
        column = frame.iloc[:, i]
        if column.dtype == object:
            column = column.map(lambda v: f"{type(v).__name__}:{v!r}")
        digest.update(pd.util.hash_pandas_object(column, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def _argument_key(name: str, value) -> str | None:
    """The key part of one argument, or None where the call cannot be keyed (then it is not
    cached): a store that does not exist, or a value whose repr says nothing about its content."""
    if name == "root":
        return f"store:{store_fingerprint(value)}" if Path(value).is_dir() else None
    if isinstance(value, pd.DataFrame):
        return f"frame:{_frame_digest(value)}"
    if value is None or isinstance(value, (str, bytes, int, float, bool, tuple, Path)):
        return repr(value)
    return None


def _key(fn, arguments: dict) -> str | None:
    parts = {}
    for name, value in arguments.items():
        part = _argument_key(name, value)
        if part is None:
            return None
        parts[name] = part
    text = json.dumps([fn.__module__, fn.__qualname__, code_fingerprint(), parts])
    return hashlib.sha256(text.encode()).hexdigest()


def _disk_path(fn, key: str) -> Path | None:
    folder = cache_dir()
    return folder / f"{fn.__qualname__}-{key[:40]}.pkl" if folder is not None else None


def _load(path: Path | None, key: str):
    """(result, warnings) from the disk level, or None: a missing, truncated, foreign or
    otherwise unreadable file is a miss, never an error."""
    if path is None or not path.is_file():
        return None
    try:
        stored_key, entry = pickle.loads(path.read_bytes())
    except Exception as exc:   # any unreadable pickle is a miss
        _log.info("ignoring unreadable cache file %s (%s)", path, exc)
        return None
    return entry if stored_key == key else None


def _save(path: Path | None, key: str, entry) -> None:
    if path is None:
        return
    try:
        atomic_write(path, pickle.dumps((key, entry), protocol=pickle.HIGHEST_PROTOCOL))
        _prune(path.parent)
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
        # A read-only home, or a result that cannot be pickled, only costs the speed.
        _log.info("could not write cache file %s (%s)", path, exc)


def _prune(folder: Path) -> None:
    files = sorted(folder.glob("*.pkl"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[DISK_ENTRIES:]:
        old.unlink(missing_ok=True)


def _remember(key: str, entry) -> None:
    _memory[key] = entry
    _memory.move_to_end(key)
    while len(_memory) > MEMORY_ENTRIES:
        _memory.popitem(last=False)


def _compute(fn, args, kwargs):
    """The function's result and the warnings it raised (recorded, to be raised again)."""
    started = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = fn(*args, **kwargs)
    except BaseException:   # nothing to cache, but what it warned before failing is said
        for w in caught:
            _raise_again(w.category, str(w.message), w.filename, w.lineno)
        raise
    computations[fn.__qualname__] += 1
    _log.debug("computed %s in %.2f s", fn.__qualname__, time.perf_counter() - started)
    return result, [(w.category, str(w.message), w.filename, w.lineno) for w in caught]


def _raise_again(category, message: str, filename: str, lineno: int) -> None:
    """A recorded warning raised again as from where it was first raised, so the filters and
    the once-per-place rule of the uncached call apply (a warning raised from a notebook cell
    would be shown where the library's is not)."""
    package = Path(__file__).resolve().parents[1]
    path = Path(filename)
    where = {}   # else warn_explicit's own guess from the file name (an explicit None is no module)
    if path.is_relative_to(package):
        parts = ("specbench", *path.relative_to(package).with_suffix("").parts)
        where["module"] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    warnings.warn_explicit(message, category, filename, lineno,
                           registry=_registries.setdefault(filename, {}), **where)


def memoised(fn):
    """``fn`` computed once per store content, library code and arguments (module docstring)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = _key(fn, bound.arguments)
        if key is None:
            return fn(*args, **kwargs)
        entry = _memory.get(key)
        if entry is not None:
            _memory.move_to_end(key)
        else:
            path = _disk_path(fn, key)
            entry = _load(path, key)
            if entry is None:
                entry = _compute(fn, args, kwargs)
                _save(path, key, entry)
            _remember(key, entry)
        result, raised = entry
        for warning in raised:
            _raise_again(*warning)
        return copy.deepcopy(result)

    return wrapper
