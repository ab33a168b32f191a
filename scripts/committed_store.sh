#!/usr/bin/env bash
# Copy the run store as committed (git's tracked files under runs/) into DEST, so that the tests
# and the references judge the same store whatever `make book` or a sweep has added to runs/
# since. Outside a git checkout, runs/ is taken whole. Prints DEST.
#   scripts/committed_store.sh _build/test/runs
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:?usage: scripts/committed_store.sh DEST}
if [ -d "$dest" ]; then chmod -R u+w "$dest"; rm -rf "$dest"; fi
mkdir -p "$dest"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z runs | tar --null -T - -cf - | tar -xf - -C "$dest" --strip-components=1
else
  cp -a runs/. "$dest"/
fi
echo "$dest"
