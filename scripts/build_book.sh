#!/usr/bin/env bash
# Render the book from the run store ($SPECBENCH_RUNS, else runs/) into $BOOK_OUT/_build/html
# (BOOK_OUT defaults to the checkout: _build/html). Chapters are executed with Jupyter Book's
# cache, which keys on a notebook's code only; a new run or a library change must re-execute
# them, so the cache is dropped whenever the run store or lib/ differ from the last build.
# myst-nb executes one chapter at a time; scripts/execute_chapters.py fills the same cache first,
# several at a time, so the build below finds them executed.
set -euo pipefail
cd "$(dirname "$0")/.."
runs_root=${SPECBENCH_RUNS:-runs}
out=${BOOK_OUT:-.}
key=$(find "$runs_root" lib -type f \( -name '*.csv' -o -name '*.json' -o -name '*.py' -o -name '*.txt' \) \
      -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum | sed "s|  $runs_root/|  runs/|" \
      | sha256sum | cut -c1-16)
mkdir -p "$out/_build"
if [ "$(cat "$out/_build/.data-key" 2>/dev/null)" != "$key" ]; then
  rm -rf "$out/_build/.jupyter_cache" "$out/_build/.doctrees"
  echo "$key" > "$out/_build/.data-key"
fi
# The chapters run BOOK_JOBS at a time (default: every CPU) into the cache the build reads.
.venv/bin/python scripts/execute_chapters.py "$out/_build/.jupyter_cache" --jobs "${BOOK_JOBS:-$(nproc)}"
exec .venv/bin/jupyter-book build . --path-output "$out" -W --keep-going
