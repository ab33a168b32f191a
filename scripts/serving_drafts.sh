#!/usr/bin/env bash
# A draft model under load (issue 47): one serving run of its own, never part of
# `make plan-under-load`. Three servers under the same load: speculation off, n-gram lookup, and
# the better draft (the depth and γ with the highest median speedup in the store's draft sweeps,
# `specbench draft --best`; run `make measure-drafts` first), each drafting the same γ.
#
#   scripts/serving_drafts.sh            (summarization, 16 prompts, levels 1,4: ~12 minutes)
#   WORKLOAD=qa COUNT=16 LEVELS=1,4 DEPTH=4 GAMMA=2 scripts/serving_drafts.sh
#
# It is a 'draft-serving' run: the serving and planning chapters (n-gram) do not read it; the
# draft chapter does. Killed? `specbench serve-bench --resume RUN` finishes it (the folder is
# printed as it starts).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${SPECBENCH_PYTHON:-.venv/bin/python}
if [ -z "${DEPTH:-}" ] || [ -z "${GAMMA:-}" ]; then
    read -r best_depth best_gamma < <($py -m specbench.cli.main draft --best)
fi
depth=${DEPTH:-$best_depth}
gamma=${GAMMA:-$best_gamma}
workload=${WORKLOAD:-summarization}
echo "serving off, n-gram γ=$gamma and the depth-$depth draft at γ=$gamma on $workload"
$py -m specbench.cli.main serve-bench --workloads "$workload" --gammas "0,$gamma" \
    --drafts "$depth:$gamma" --concurrencies "${LEVELS:-1,4}" --request-rates '' \
    --num-prompts "${COUNT:-16}" --output-len 64 \
    --notes "a draft model under load: off, n-gram and the depth-$depth draft at γ=$gamma (make serving-drafts)"
