#!/usr/bin/env bash
# The operator's answer, checked under real load (after `make book` on this machine, same boot).
#
#   scripts/plan_under_load.sh                 (summarization, 40 prompts, about an hour)
#   CATEGORY=rag COUNT=40 LEVELS=1,2,4,8 scripts/plan_under_load.sh
#
# A Spec-Bench category stands in for the operator's prompts: COUNT prompts after the ones a
# short sweep measures (`specbench spec-bench-prompts`, written under _build/, never committed).
# `specbench plan` answers for them from this host's `make book` run (an untimed acceptance pass
# over the first PLAN_PROMPTS); `specbench serve-bench --plan` then serves the same prompts with
# the plan's configuration beside fixed γ 2, 4, 6 and speculation off, LEVELS concurrencies,
# COUNT requests per level. The serving run's manifest keeps the plan as it was before the load.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
category=${CATEGORY:-summarization}
count=${COUNT:-40}
folder=_build/plan-under-load
mkdir -p "$folder"
read -r calibration microbench _dtype < <($py scripts/host_calibration.py)
prompts=$folder/$category.jsonl
$py -m specbench.cli.main spec-bench-prompts "$category" --count "$count" --out "$prompts"
args=(--calibration "$calibration" --workload-file "$prompts" --prompts "${PLAN_PROMPTS:-20}")
[ "$microbench" != - ] && args+=(--microbench "$microbench")
$py -m specbench.cli.main plan "${args[@]}" --json > "$folder/plan.json"
echo "plan: $folder/plan.json"
$py -m specbench.cli.main serve-bench --plan "$folder/plan.json" --workloads "file:$prompts" \
    --gammas 0,2,4,6 --concurrencies "${LEVELS:-1,2,4,8}" --request-rates '' \
    --num-prompts "$count" --output-len 64 \
    --notes "the plan for $count Spec-Bench $category prompts (held out), checked under load"
