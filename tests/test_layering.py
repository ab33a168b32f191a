"""The layering pyproject.toml states, enforced: the tree keeps every import-linter contract,
and each contract breaks when an import that crosses it is added to a copy of the package —
so a contract that stopped checking anything would fail here."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lib" / "specbench"
LINT = Path(sys.executable).with_name("lint-imports")

LAYERS = "Layers: "
REPORT_READS_STORED_RUNS = "The report reads stored runs only"
STORE_IS_FILE_IO = "The store is file I/O only"
CHAPTERS_ARE_LEAVES = "Chapters are leaves"


def _lint(lib: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=ROOT, env={"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


def _broken(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.endswith(" BROKEN")]


def test_the_tree_keeps_every_contract():
    result = _lint(ROOT / "lib")
    assert result.returncode == 0 and not _broken(result), result.stdout[-3000:]
    for contract in (LAYERS, REPORT_READS_STORED_RUNS, STORE_IS_FILE_IO, CHAPTERS_ARE_LEAVES):
        assert any(line.startswith(contract) and line.endswith(" KEPT")
                   for line in result.stdout.splitlines()), f"no contract {contract!r} checked"


@pytest.mark.parametrize("module, added, contract", [
    ("theory/model.py", "from specbench.report import charts", LAYERS),
    ("report/tables.py", "import specbench.measure", REPORT_READS_STORED_RUNS),
    ("report/tables.py", "from specbench.engine import counters", REPORT_READS_STORED_RUNS),
    ("store/runs.py", "import specbench.engine", STORE_IS_FILE_IO),
    ("store/hosts.py", "from specbench.measure import contract", STORE_IS_FILE_IO),
    ("report/chapters/index.py", "from specbench.report.chapters import story",
     CHAPTERS_ARE_LEAVES),
])
def test_an_import_across_a_contract_breaks_it(tmp_path, module, added, contract):
    copy = tmp_path / "lib"
    shutil.copytree(PKG, copy / "specbench", ignore=shutil.ignore_patterns("__pycache__"))
    path = copy / "specbench" / module
    path.write_text(path.read_text() + f"\n{added}  # across the contract\n")
    result = _lint(copy)
    assert result.returncode != 0, result.stdout[-3000:]
    assert any(line.startswith(contract) for line in _broken(result)), result.stdout[-3000:]
    importer = "specbench." + module.removesuffix(".py").replace("/", ".")
    assert importer in result.stdout
