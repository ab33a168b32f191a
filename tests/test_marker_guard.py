"""The marker guard (tests/marker_guard.py) in a pytest of its own: it fails a test that reads
runs/ without the `data` marker, names the reader, and does not mistake a deletion elsewhere
for a read (pytest clearing a --basetemp that holds a folder called "runs")."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(tmp_path, body: str, *args) -> subprocess.CompletedProcess:
    """A probe test in a folder of its own, under the guard as a plugin (never in tests/, where
    a parallel pytest session would collect it), run from the checkout as make test runs it."""
    (tmp_path / "probe").mkdir()
    test = tmp_path / "probe" / "test_probe.py"
    test.write_text(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "marker_guard", "--rootdir", str(test.parent), str(test),
                           *args], cwd=ROOT, capture_output=True, text=True, env=env)


def test_an_unmarked_read_of_runs_fails_naming_its_reader(tmp_path):
    runs = str(ROOT / "runs")
    done = _pytest(tmp_path, f"import os\ndef test_reads():\n    os.listdir({runs!r})\n")
    assert done.returncode == 1, done.stdout
    assert "without the marker data" in done.stdout and "(read by thread MainThread" \
        in done.stdout and "test_reads" in done.stdout


def test_clearing_a_basetemp_with_a_runs_folder_is_not_a_read(tmp_path):
    # A mutation that fails this: drop the `_deleting()` check in marker_guard._audit.
    basetemp = tmp_path / "basetemp"
    (basetemp / "earlier" / "runs" / "sku").mkdir(parents=True)
    (basetemp / "earlier" / "runs" / "sku" / "manifest.json").write_text("{}")
    done = _pytest(tmp_path, "def test_tmp(tmp_path_factory):\n"
                   "    tmp_path_factory.mktemp('a')\n", f"--basetemp={basetemp}")
    assert done.returncode == 0, done.stdout
