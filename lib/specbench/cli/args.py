"""Argument types for every ``specbench`` command: a user error is caught by argparse.

Each function here is an argparse ``type=``: it turns the text into a value or raises
``argparse.ArgumentTypeError`` with a message that states the accepted values, so argparse
prints the usage line plus one line naming the argument, and exits with status 2 — before any
engine, server, job or microbenchmark starts and before any run folder is made. New commands
(``plan``, serving, ``cluster``) reuse them::

    p.add_argument("--gammas", type=cliargs.gamma_list, default=(0, 2, 4, 6))
    p.add_argument("--resume", type=cliargs.run_folder)
    cliargs.reject_with(parser, args, "--resume", ["--gammas", ...], "why")  # conflicts

Checks that need several arguments at once raise :class:`UsageError` from the command's own
validation; :func:`main` turns it into the same usage line and exit status 2.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from specbench.engine.vllm_engine import DTYPES

__all__ = ["DTYPES", "UsageError", "positive_int", "nonnegative_int", "int_list", "gamma_list",
           "batch_list", "choice_list", "dtype", "existing_path", "existing_file", "existing_dir",
           "store_root", "model_ref", "run_folder", "run_folder_of", "reject_with",
           "explicitly_set"]

# The dtypes the engine and the roofline microbenchmark both understand.


class UsageError(ValueError):
    """A bad combination of arguments, found after parsing; the CLI exits 2 with it."""


def _fail(message: str):
    raise argparse.ArgumentTypeError(message)


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except (ValueError, AttributeError):
        _fail(f"expected {what}, got {text!r}")


def positive_int(text: str) -> int:
    """A whole number >= 1."""
    value = _int(text, "a whole number >= 1")
    if value < 1:
        _fail(f"expected a whole number >= 1, got {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    """A whole number >= 0."""
    value = _int(text, "a whole number >= 0")
    if value < 0:
        _fail(f"expected a whole number >= 0, got {text!r}")
    return value


def int_list(text: str, low: int = 0, what: str = "value") -> tuple[int, ...]:
    """Comma-separated whole numbers >= ``low``, no duplicates."""
    items = [t for t in text.split(",")]
    if not text.strip() or any(not t.strip() for t in items):
        _fail(f"expected comma-separated whole numbers >= {low}, got {text!r}")
    values = tuple(_int(t, f"comma-separated whole numbers >= {low}") for t in items)
    for v in values:
        if v < low:
            _fail(f"{what} must be a whole number >= {low}, got {v}")
    if len(set(values)) != len(values):
        _fail(f"a {what} is repeated in {text!r}")
    return values


def gamma_list(text: str) -> tuple[int, ...]:
    """γ values: whole numbers >= 0 that include 0 (speedups are taken against γ=0)."""
    values = int_list(text, 0, "gamma")
    if 0 not in values:
        _fail(f"must include 0 (speedups are measured against γ=0), got {text!r}")
    return values


def rate_list(text: str) -> tuple[float, ...]:
    """Comma-separated request rates; an empty string means none."""
    try:
        return tuple(float(x) for x in text.split(",")) if text else ()
    except ValueError:
        _fail(f"expected comma-separated numbers, got {text!r}")


def draft_arms(text: str) -> tuple[tuple[int, int], ...]:
    """Comma-separated DEPTH:GAMMA pairs (a draft model's arms); an empty string means none."""
    arms = []
    for item in (t for t in text.split(",") if t.strip()):
        depth, sep, gamma = item.partition(":")
        try:
            pair = (int(depth), int(gamma))
        except ValueError:
            pair = None
        if not sep or pair is None or min(pair) < 1:
            _fail(f"expected DEPTH:GAMMA pairs of whole numbers >= 1 (e.g. 4:2), got {item!r}")
        arms.append(pair)
    return tuple(arms)


def batch_list(text: str) -> tuple[int, ...]:
    """Batch sizes: whole numbers >= 1."""
    return int_list(text, 1, "batch")


def choice_list(choices) -> callable:
    """A comma list whose items are all in ``choices`` (evaluated lazily, so a registry may
    grow after the parser is built)."""
    def parse(text: str) -> tuple[str, ...]:
        allowed = sorted(choices() if callable(choices) else choices)
        items = tuple(t.strip() for t in text.split(","))
        bad = [t for t in items if t not in allowed]
        if not text.strip() or bad:
            _fail(f"unknown {bad[0]!r}; choose from {', '.join(allowed)}" if bad and bad[0]
                  else f"expected a comma list from {', '.join(allowed)}, got {text!r}")
        return items
    parse.__name__ = "comma list"
    return parse


def dtype(text: str) -> str:
    """One of :data:`DTYPES`."""
    if text not in DTYPES:
        _fail(f"invalid choice {text!r}; choose from {', '.join(DTYPES)}")
    return text


def existing_path(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.exists():
        _fail(f"no such file or folder: {text!r}")
    return path


def existing_file(text: str) -> str:
    """An existing file (returned as given)."""
    if not existing_path(text).is_file():
        _fail(f"not a file: {text!r}")
    return text


def existing_dir(text: str) -> Path:
    path = existing_path(text)
    if not path.is_dir():
        _fail(f"not a folder: {text!r}")
    return path


def store_root(text: str) -> Path:
    """A run store folder: created when absent, but never a file, and writable — checked here,
    before any probe, model load or engine start, so a bad --root fails in a second."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        _fail(f"{text!r} is a file, not a run store folder")
    missing = next((p for p in [path, *path.parents] if p.parent.exists()), path)
    created = not missing.exists()
    try:   # the folder is made and written to for real (as root, os.access says yes to /proc)
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        _fail(f"{text!r} is not a writable run store folder ({exc.strerror or exc})")
    finally:
        if created and missing.exists():
            shutil.rmtree(missing)   # a probe only: the run creates its folder when it starts
    return path


def model_ref(text: str) -> str:
    """A local checkpoint folder with a config.json, or an org/name hub id."""
    looks_like_path = text.startswith(("/", ".", "~")) or text.count("/") != 1
    if looks_like_path:
        path = Path(text).expanduser()
        if not path.is_dir():
            _fail(f"no such checkpoint folder: {text!r} (give a local checkpoint folder or "
                  "an org/name hub id)")
        if not (path / "config.json").is_file():
            _fail(f"{text!r} has no config.json — not a model checkpoint folder")
    return text


def run_folder(text: str, *kinds: str) -> Path:
    """An existing run folder whose manifest opens (valid JSON, every field present), of one
    of ``kinds`` when given."""
    from specbench.store.runs import RunSchemaError, open_run
    path = existing_dir(text)
    if not (path / "manifest.json").is_file():
        _fail(f"{text!r} has no manifest.json — not a run folder (runs/<sku>/<run-id>/)")
    try:
        run = open_run(path)
    except RunSchemaError as exc:
        _fail(str(exc))
    if kinds and run.manifest["kind"] not in kinds:
        _fail(f"{text!r} is a {run.manifest['kind']} run, not a {' or '.join(kinds)} run")
    return path


def run_folder_of(*kinds: str):
    """:func:`run_folder` restricted to some kinds of run, as an argparse type."""
    def parse(text: str) -> Path:
        return run_folder(text, *kinds)
    parse.__name__ = f"{' or '.join(kinds)} run folder"
    return parse


def explicitly_set(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   flags: list[str]) -> list[str]:
    """Which of ``flags`` the user gave a value other than the default."""
    given = []
    for action in parser._actions:  # private: argparse has no public lookup by flag
        flag = next((f for f in flags if f in action.option_strings), None)
        if flag is None:
            continue
        default = action.default
        if isinstance(default, str) and action.type is not None:
            default = action.type(default)  # argparse converts a text default the same way
        if getattr(args, action.dest) != default:
            given.append(flag)
    return given


def reject_with(parser: argparse.ArgumentParser, args: argparse.Namespace, flag: str,
                conflicting: list[str], why: str = "") -> None:
    """Exit 2 when ``flag`` is given together with any of ``conflicting``."""
    dest = flag.lstrip("-").replace("-", "_")
    if getattr(args, dest, None) in (None, False):
        return
    clash = explicitly_set(parser, args, conflicting)
    if clash:
        parser.error(f"argument {flag}: cannot be combined with {', '.join(clash)}"
                     + (f" ({why})" if why else ""))
