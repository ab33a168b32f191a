"""The package's layout is its architecture: layers checked by import-linter, no cycles, no
module over 500 lines, module paths that work, chapters that import only the report and the
command line — and the restructuring changed no number of the book."""
import ast
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lib" / "specbench"
LINT = Path(sys.executable).with_name("lint-imports")
MAX_LINES = 500


def _lint(lib: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=ROOT, env={"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_the_layers_contract_holds():
    result = _lint(ROOT / "lib")
    assert result.returncode == 0, result.stdout[-3000:]


def test_an_upward_import_breaks_the_contract(tmp_path):
    copy = tmp_path / "lib"
    shutil.copytree(PKG, copy / "specbench", ignore=shutil.ignore_patterns("__pycache__"))
    model = copy / "specbench" / "theory" / "model.py"
    model.write_text(model.read_text() + "\nfrom specbench.report import charts  # upward\n")
    result = _lint(copy)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "specbench.theory.model" in result.stdout


def test_no_import_cycles():
    graph = grimp.build_graph("specbench")
    modules = sorted(graph.modules)
    cycles = [(a, b) for a in modules for b in graph.find_modules_directly_imported_by(a)
              if graph.chain_exists(importer=b, imported=a)]
    assert not cycles, f"import cycles between: {cycles}"


def test_no_module_is_longer_than_500_lines():
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split by job: {long}"


def test_every_subpackage_says_what_it_is_for():
    for init in PKG.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "TODO" not in doc, f"{init.relative_to(PKG)} has no docstring"


MODULE_STRING = re.compile(r"-m (specbench(?:\.[a-z_]+)+)")


def _module_strings() -> set[str]:
    files = [ROOT / "Makefile", ROOT / "README.md", *ROOT.glob("scripts/*"),
             *ROOT.glob("cluster/*"), *ROOT.glob("notebooks/*.md"), *PKG.rglob("*.py")]
    return {m for f in files if f.is_file() for m in MODULE_STRING.findall(f.read_text())}


@pytest.mark.parametrize("module", sorted(_module_strings()))
def test_every_module_path_written_as_a_string_runs(module):
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_console_script_and_its_subcommands_answer_help():
    script = Path(sys.executable).with_name("specbench")
    for args in ([], ["sweep"], ["plan"], ["cluster"], ["serve-bench"], ["microbench"],
                 ["lossless"], ["overhead"], ["runs"]):
        result = subprocess.run([str(script), *args, "--help"], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, (args, result.stderr[-2000:])


LOWER_LAYERS = re.compile(r"^\s*(?:from|import) specbench\.(theory|engine|store|measure)\b", re.M)


def test_chapters_import_only_the_report_and_the_command_line():
    for chapter in (ROOT / "book").glob("*.md"):
        bad = LOWER_LAYERS.findall(chapter.read_text())
        assert not bad, f"{chapter.name} imports specbench.{bad[0]}: go through specbench.report"


def test_the_package_exports_what_user_code_needs():
    import specbench
    for name in ("load_runs", "sweep_cells", "error_table", "leave_one_sku_out",
                 "plan_from_runs"):
        assert callable(getattr(specbench, name))


def _same(before: str, after: str | None) -> bool:
    if before == after:
        return True
    try:   # a float recomputed from stored tables instead of read back: last bits only
        return math.isclose(float(before), float(after), rel_tol=1e-9)
    except (TypeError, ValueError):
        return False


@pytest.mark.data
def test_the_restructuring_changed_no_glued_value():
    """Every glued name and value of the book equals the one saved before the restructuring
    (tests/fixtures/glue_before_layout.json) while the store holds the same runs."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from glue_values import chapters, glue_values
    saved = json.loads((ROOT / "tests" / "fixtures" / "glue_before_layout.json").read_text())
    runs = sorted({p.parent.name for p in (ROOT / "runs").glob("*/*/manifest.json")})
    if runs != saved["runs"]:
        pytest.skip("the run store changed since the layout fixture was saved")
    for chapter in chapters():
        now = glue_values(chapter)
        for name, value in saved["glue"][chapter.stem].items():
            assert _same(value, now.get(name)), (chapter.stem, name, value, now.get(name))
