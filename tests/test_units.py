"""Small, honest units: no function in the package longer than 60 lines, no cached function
called through ``__wrapped__``, and no private name (leading underscore) imported from another
module — a name another module needs is public, or the code that needs it moves.

Functions still over the limit are listed in LONG_FUNCTIONS, an allowlist that can only shrink:
the test fails when a listed function is split (remove it from the list) and when a function
not listed grows past the limit."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "lib" / "specbench"
MAX_LINES = 60

# (module path under lib/specbench, function name): still longer than MAX_LINES. Empty: every
# function is within the limit; a function that must stay longer is named here with its reason.
LONG_FUNCTIONS: set[tuple[str, str]] = set()


def _functions():
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield (str(path.relative_to(PKG)), node.name), node.end_lineno - node.lineno + 1


def test_no_function_is_longer_than_the_limit():
    long = {key: lines for key, lines in _functions() if lines > MAX_LINES}
    new = {f"{m}:{f} ({lines} lines)" for (m, f), lines in long.items()
           if (m, f) not in LONG_FUNCTIONS}
    assert not new, f"functions over {MAX_LINES} lines: split them\n" + "\n".join(sorted(new))


def test_the_allowlist_only_shrinks():
    long = {key for key, lines in _functions() if lines > MAX_LINES}
    split = sorted(f"{m}:{f}" for m, f in LONG_FUNCTIONS - long)
    assert not split, "no longer over the limit: remove from LONG_FUNCTIONS\n" + "\n".join(split)


def test_no_cached_function_is_called_through_wrapped():
    found = [f"{path.relative_to(PKG)}:{node.lineno}"
             for path in sorted(PKG.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "__wrapped__"]
    assert not found, "call a public uncached function instead of __wrapped__:\n" + \
        "\n".join(found)


def _private_imports(source: str, filename: str = "<planted>") -> list[str]:
    return [f"{filename}:{node.lineno}: from {node.module} import {alias.name}"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.split(".")[0] == "specbench"
            for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_no_private_name_is_imported_across_modules():
    found = [hit for path in sorted(PKG.rglob("*.py"))
             for hit in _private_imports(path.read_text(), str(path.relative_to(PKG)))]
    assert not found, "make the name public or move the code:\n" + "\n".join(found)


def test_a_planted_private_import_is_found():
    assert _private_imports("from specbench.theory.predict import _pot")
    assert not _private_imports("from specbench.theory.predict import drafting_pot\n"
                                "from __future__ import annotations")
