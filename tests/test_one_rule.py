"""One definition per concept: the error of a prediction and its MAPE live in
specbench.theory.errors, and nowhere else in the package computes either.

The package is parsed (ast, not text), and three shapes are rivals outside errors.py:

* a relative difference in percent — ``100·(a − b)/b`` in any arrangement
  (``(a - b) / b * 100``, ``abs(a - b) / b * 100``), or ``100·(a/b − 1)``;
* a MAPE — the mean of absolute values (``x.abs().mean()``, ``np.mean(np.abs(x))``,
  ``np.abs(x).mean()``, a mean over columns named ``…abs_pct``);
* a function named like the error (``*mape*``, ``*percent_error*``, ``*cell_error*``) that
  computes it itself instead of calling errors.py (a grouped table that calls it is fine).

Spreads (``100·(max − min)/median``), tolerances scaled by something other than the
subtracted value, and savings (``100·(1 − a/b)``) are other quantities and are not flagged;
the planted snippets below show both sides, so a detector that stopped seeing rivals, or
started flagging everything, fails here.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "lib" / "specbench"
THE_ONE = PKG / "theory" / "errors.py"
ERROR_NAMES = ("mape", "percent_error", "cell_error")


def _is_100(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in (100, 100.0)


def _is_1(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in (1, 1.0)


def _same(a, b) -> bool:
    return ast.dump(a) == ast.dump(b)


def _call_name(node) -> str | None:
    """'abs' for abs(x), np.abs(x), numpy.abs(x); 'mean' for np.mean(x); None otherwise."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
            and node.func.value.id in ("np", "numpy"):
        return node.func.attr
    return None


def _method(node, name: str):
    """The receiver of ``receiver.name()``, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == name and not node.args:
        return node.func.value
    return None


def _unwrap_abs(node):
    """x for abs(x), np.abs(x), x.abs(), -x; node otherwise."""
    while True:
        if _call_name(node) == "abs" and len(node.args) == 1:
            node = node.args[0]
        elif _method(node, "abs") is not None:
            node = _method(node, "abs")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node = node.operand
        else:
            return node


def _relative_difference(node) -> bool:
    """(a − b)/b or |a − b|/b, or a/b − 1 (the unit-free relative difference)."""
    node = _unwrap_abs(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        top = _unwrap_abs(node.left)
        return (isinstance(top, ast.BinOp) and isinstance(top.op, ast.Sub)
                and _same(top.right, node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _is_1(node.right):
        ratio = _unwrap_abs(node.left)
        return isinstance(ratio, ast.BinOp) and isinstance(ratio.op, ast.Div)
    return False


def _percent_difference(node) -> bool:
    if not isinstance(node, ast.BinOp):
        return False
    if isinstance(node.op, ast.Mult):   # 100 · relative difference, either side
        return ((_is_100(node.left) and _relative_difference(node.right))
                or (_is_100(node.right) and _relative_difference(node.left)))
    if isinstance(node.op, ast.Div):    # 100·(a − b) / b
        top = node.left
        if isinstance(top, ast.BinOp) and isinstance(top.op, ast.Mult):
            diff = _unwrap_abs(top.right if _is_100(top.left) else
                               top.left if _is_100(top.right) else top)
            return (isinstance(diff, ast.BinOp) and isinstance(diff.op, ast.Sub)
                    and _same(diff.right, node.right))
    return False


def _absolute_error_columns(node) -> bool:
    """table["…abs_pct"] or table[["…abs_pct", …]]: columns that hold absolute errors."""
    if not isinstance(node, ast.Subscript):
        return False
    names = node.slice.elts if isinstance(node.slice, ast.List) else [node.slice]
    return any(isinstance(x, ast.Constant) and isinstance(x.value, str)
               and x.value.endswith("abs_pct") for x in names)


def _mean_of_absolute(node) -> bool:
    receiver = _method(node, "mean")
    if receiver is not None and (_method(receiver, "abs") is not None
                                 or _call_name(receiver) == "abs"
                                 or _absolute_error_columns(receiver)):
        return True
    return (_call_name(node) in ("mean", "nanmean") and len(node.args) >= 1
            and (_call_name(node.args[0]) == "abs" or _method(node.args[0], "abs") is not None))


def _calls_the_one(function) -> bool:
    return any((isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "errors")
               or (isinstance(n, ast.Name) and n.id in ("percent_error", "percent_change", "mape",
                                                        "mape_of", "mape_interval"))
               for n in ast.walk(function))


def rivals(source: str, filename: str = "<planted>") -> list[str]:
    """Every rival of errors.py in a module's source, as 'file:line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and any(n in node.name.lower() for n in ERROR_NAMES) \
                and not _calls_the_one(node):
            found.append(f"{filename}:{node.lineno}: function {node.name} computes an error")
        elif isinstance(node, ast.expr) and _percent_difference(node):
            found.append(f"{filename}:{node.lineno}: inline percent difference "
                         f"{ast.unparse(node)[:80]}")
        elif isinstance(node, ast.expr) and _mean_of_absolute(node):
            found.append(f"{filename}:{node.lineno}: inline MAPE {ast.unparse(node)[:80]}")
    return found


def test_the_package_has_no_rival_of_the_error_function():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path != THE_ONE:
            found += rivals(path.read_text(), str(path.relative_to(PKG)))
    assert not found, ("compute errors with specbench.theory.errors:\n" + "\n".join(found))


def test_errors_py_itself_holds_the_formula():
    assert rivals(THE_ONE.read_text()), "the one definition is no longer recognisable"


@pytest.mark.parametrize("snippet", [
    "e = 100 * (pred - meas) / meas",
    "e = (pred - meas) / meas * 100",
    "e = 100.0 * ((c['p'] - c['m']) / c['m'])",
    "e = abs(pred - meas) / meas * 100",
    "e = 100 * np.abs(pred - meas) / meas",
    "e = (pred / meas - 1) * 100",
    "gap = (100 * (on['pred'] / on['meas'] - 1)).abs()",
    "moved = (b / a - 1).abs() * 100",
    "m = g['err_pct'].abs().mean()",
    "m = np.mean(np.abs(errors))",
    "m = np.abs(errors).mean()",
    "m = abl.groupby('batch')[['eq1_abs_pct', 'blind_abs_pct']].mean()",
    "def tier_mape(t):\n    return t.groupby('tier')['err'].apply(lambda s: s.sum() / len(s))",
    "def my_percent_error(p, m):\n    return p / m",
])
def test_a_planted_rival_is_found(snippet):
    assert rivals(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "spread = 100 * (values.max() - values.min()) / med",
    "noise = 100 * (hi - lo) / 2 / centre",
    "saving = 100 * (1 - best / base)",
    "share = 100 * x.mean()",
    "close = abs(a - b) < 1.0",
    "differs = 100 * np.abs(mine - theirs) / scale",
    "worst = c['err'].abs().max()",
    "bias = judged['model_err_pct'].mean()",
    "def mape_by(t, by):\n    return t.groupby(by)['e'].agg(errors.mape_of)",
    "cv = (100 * std / mean).median()",
])
def test_other_quantities_are_not_flagged(snippet):
    assert not rivals(snippet), snippet


# -- one γ rule ---------------------------------------------------------------------------------

GAMMA_RULE = PKG / "theory" / "gamma_rule.py"
# recommend, recommend_per_batch, _choose, ratio_transfer_choice, static_gamma — not the tables
# that show recommendations (recommendation_summary) nor argparse's choice_list.
RULE_NAME = re.compile(r"^_?(recommend(_\w+)?|choose(_\w+)?|\w+_choice|static_gamma|best_gamma)$")
THE_RULE = ("recommend", "recommend_by_speedup", "fastest")


def gamma_rivals(source: str, filename: str = "<planted>") -> list[str]:
    """Functions named like a γ choice that decide without calling the one rule."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and RULE_NAME.match(node.name) \
                and not any(isinstance(n, ast.Call) and (
                    (isinstance(n.func, ast.Name) and n.func.id in THE_RULE)
                    or (isinstance(n.func, ast.Attribute) and n.func.attr in THE_RULE))
                    for n in ast.walk(node)):
            found.append(f"{filename}:{node.lineno}: {node.name} chooses γ by its own rule")
    return found


def test_every_gamma_choice_goes_through_the_one_rule():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path != GAMMA_RULE:
            found += gamma_rivals(path.read_text(), str(path.relative_to(PKG)))
    assert not found, "choose γ with specbench.report.plan.gamma.recommend:\n" + "\n".join(found)


def test_a_planted_gamma_rule_is_found():
    assert gamma_rivals("def static_gamma(t):\n    m = t.groupby('gamma')['speedup'].mean()\n"
                        "    return int(m.idxmax()) if m.max() > 1 else 0")
    assert not gamma_rivals("def static_gamma(t):\n    return recommend_by_speedup(t)")


def test_the_rule_decides_alike_on_every_path():
    """A tie up to the last bits goes to the smaller γ, and a best speedup of exactly 1 is
    speculation off, whether the plan comes from runs, from the regret table's planner, from
    the operator's prompts or from ratio transfer's measured speedups."""
    import pandas as pd

    from specbench.report.plan import gamma, own_prompts, regret, under_load
    tied = {2: 1.5, 4: 1.5 * (1 + 1e-12), 6: 1.2}
    off = {2: 1.0, 4: 0.8}
    t_base = 12.0
    for speedups, want in ((tied, 2), (off, 0)):
        pots = {g: t_base / s for g, s in speedups.items()}
        assert gamma.recommend(pots, t_base) == want
        assert regret._choose({0: t_base, **pots}) == want
        assert gamma.recommend_by_speedup(speedups) == want
        table = pd.DataFrame([{"batch": 1, "gamma": g, "speedup": s, "low": s, "high": s,
                               "gamma_basis": "", "batch_basis": ""}
                              for g, s in speedups.items()])
        assert own_prompts.recommend_per_batch(table)["gamma"].iloc[0] == want
        assert own_prompts.static_gamma(table) == want
        cells = table.assign(workload="w")
        assert under_load.ratio_transfer_choice(cells, batch=1) == want
