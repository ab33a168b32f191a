#!/usr/bin/env bash
# pytest from the project's venv, where collecting no test is a failure (pytest's exit 5 would
# otherwise let a broken selection pass silently).
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi
exit "$rc"
