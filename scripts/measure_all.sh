#!/usr/bin/env bash
# The measurements behind the book, one after the other on a quiet machine:
# the γ-sweep, the host floor, and the benchmark of the harness's own overhead.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m specbench.cli.notebooks sweep "$@"
.venv/bin/python -m specbench.cli.notebooks host_floor
.venv/bin/specbench overhead
