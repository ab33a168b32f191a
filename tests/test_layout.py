"""The package's layout is its architecture: no cycles, no module over 500 lines, module paths
that work, chapters that import only the report and the command line (the layers themselves:
tests/test_layering.py). (That the book's numbers do not move under a refactoring is the chapter
references' job: tests/test_chapter_outputs.py.)"""
import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lib" / "specbench"
MAX_LINES = 500


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


LOWER_LAYERS = re.compile(
    r"^\s*(?:from|import) specbench\.(theory|engine|store|measure)\b", re.M)


def test_chapters_import_only_the_report_the_derived_tables_and_the_command_line():
    for chapter in (ROOT / "book").glob("*.md"):
        bad = LOWER_LAYERS.findall(chapter.read_text())
        assert not bad, (f"{chapter.name} imports specbench.{bad[0]}: read a derived table "
                         "(specbench.derive) or go through specbench.report")


def test_the_package_exports_what_user_code_needs():
    import specbench
    for name in ("load_runs", "sweep_cells", "error_table", "leave_one_sku_out",
                 "plan_from_runs"):
        assert callable(getattr(specbench, name))


def test_readme_is_a_guide_of_at_most_800_words():
    # The user's guide: the two commands, what each target does, where things are. Timings
    # live in book/reproduce.md, history in CHANGELOG.md.
    words = len((ROOT / "README.md").read_text().split())
    assert words <= 800, f"README.md has {words} words (at most 800)"


def test_chapters_holds_chapters_and_nothing_else():
    """One module per book chapter in specbench.report.chapters, named as its page; shared
    numbers live in specbench.report (a claim two chapters share is a value both read)."""
    pages = {p.stem for p in (ROOT / "book").glob("*.md")}
    modules = {p.stem for p in (ROOT / "lib" / "specbench" / "report" / "chapters").glob("*.py")
               if p.stem != "__init__"}
    assert modules <= pages, f"not chapters: {sorted(modules - pages)}"
