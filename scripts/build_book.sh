#!/usr/bin/env bash
# Render the book from runs/. Chapters are executed with Jupyter Book's cache, which keys on
# a notebook's code only; a new run or a library change must re-execute them, so the cache is
# dropped whenever the run store ($SPECBENCH_RUNS, else runs/) or lib/ differ from the last build.
set -euo pipefail
cd "$(dirname "$0")/.."
runs_root=${SPECBENCH_RUNS:-runs}
key=$(find "$runs_root" lib -type f \( -name '*.csv' -o -name '*.json' -o -name '*.py' -o -name '*.txt' \) \
      -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
mkdir -p _build
if [ "$(cat _build/.data-key 2>/dev/null)" != "$key" ]; then
  rm -rf _build/.jupyter_cache _build/.doctrees
  echo "$key" > _build/.data-key
fi
exec .venv/bin/jupyter-book build . --path-output . -W --keep-going
