#!/usr/bin/env bash
# The operator's answer, checked under real load (after `make book` on this machine, same boot).
#
#   scripts/plan_under_load.sh                 (rag, 40 prompts, about 35 minutes)
#   CATEGORY=qa COUNT=40 LEVELS=1,2,4,8 scripts/plan_under_load.sh
#
# A Spec-Bench category stands in for the operator's prompts: COUNT prompts after the ones a
# short sweep measures (`specbench spec-bench-prompts`, written under _build/, never committed).
# `specbench plan` answers for them from this host's `make book` run (an untimed acceptance pass
# over the first PLAN_PROMPTS); `specbench serve-bench --plan` then serves the same prompts with
# the plan's configuration beside fixed γ 2, 4, 6 and speculation off, LEVELS concurrencies,
# COUNT requests per level. The serving run's manifest keeps the plan as it was before the load.
#
# The plan prices each step of its load prediction from the servers' own steps: before planning,
# a short serving probe (its own serving run: speculation off, γ=2 and the largest γ at every
# level, PROBE_COUNT prompts of PROBE_CATEGORY, never the held-out CATEGORY) records what a step costs
# where the API server, the benchmark client and the engine share the cores. PROBE_CATEGORY is by
# default the other category whose prompts are nearest in length, so the probe's steps read the
# contexts the held-out prompts will; every level, so rows and context vary apart; two drafting
# γ, so the cost of a drafting step and the cost of each drafted token are told apart
# (PROBE_GAMMAS).
# PROBE=off prices from the `make book` sweep's offline steps instead.
#
# Killed or interrupted? Run it again with the same settings: it resumes the serving run it
# started (see below) and measures only the levels that run lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${SPECBENCH_PYTHON:-.venv/bin/python}
# rag by default: prompts the book never tuned on (the first runs served summarization)
category=${CATEGORY:-rag}
count=${COUNT:-40}
levels=${LEVELS:-1,2,4,8}
folder=${PLAN_UNDER_LOAD_DIR:-_build/plan-under-load}
mkdir -p "$folder"
read -r calibration microbench _dtype < <($py scripts/host_calibration.py)
prompts=$folder/$category.jsonl
$py -m specbench.cli.main spec-bench-prompts "$category" --count "$count" --out "$prompts"
# How a rerun finds its run: the serving run started below writes its folder into $record
# (SPECBENCH_RUN_RECORD, read by the run store as the run is created), a file named after this
# script's inputs (calibration runs, category, count, plan prompts, levels). When that run is
# still incomplete, a rerun with the same inputs resumes it with the plan its manifest holds,
# without planning again; a complete run, or other inputs, start afresh.
inputs="$calibration $microbench $category $count ${PLAN_PROMPTS:-20} $levels"
record=$folder/serving-run-$(printf '%s' "$inputs" | sha256sum | cut -c1-16)
still_running='import json, sys; sys.exit(json.load(open(sys.argv[1]))["status"] != "running")'
if [ -s "$record" ] && $py -c "$still_running" "$(cat "$record")/manifest.json" 2>/dev/null; then
    echo "resuming the incomplete serving run $(cat "$record")"
    exec $py -m specbench.cli.main serve-bench --resume "$(cat "$record")"
fi
args=(--calibration "$calibration" --workload-file "$prompts" --prompts "${PLAN_PROMPTS:-20}")
[ "$microbench" != - ] && args+=(--microbench "$microbench")
if [ "${PROBE:-on}" != off ]; then
    probe_category=${PROBE_CATEGORY:-$($py -m specbench.cli.main spec-bench-prompts "$category" \
        --nearest-in-length)}
    if [ "$probe_category" = "$category" ]; then
        echo "PROBE_CATEGORY is the held-out CATEGORY ($category): the probe must not see the" \
             "prompts the plan is checked on; choose another" >&2
        exit 2
    fi
    probe_gammas=${PROBE_GAMMAS:-0,2,6}
    probe_inputs="$calibration $probe_category ${PROBE_COUNT:-16} $levels $probe_gammas"
    probe_record=$folder/probe-run-$(printf '%s' "$probe_inputs" | sha256sum | cut -c1-16)
    complete='import json, sys; sys.exit(json.load(open(sys.argv[1]))["status"] != "complete")'
    if [ -s "$probe_record" ] && $py -c "$complete" "$(cat "$probe_record")/manifest.json" 2>/dev/null; then
        echo "step-cost probe: $(cat "$probe_record") (measured already)"
    elif [ -s "$probe_record" ] && $py -c "$still_running" "$(cat "$probe_record")/manifest.json" 2>/dev/null; then
        $py -m specbench.cli.main serve-bench --resume "$(cat "$probe_record")"
    else
        SPECBENCH_RUN_RECORD=$probe_record $py -m specbench.cli.main serve-bench \
            --workloads "$probe_category" --gammas "$probe_gammas" \
            --concurrencies "$levels" --request-rates '' \
            --num-prompts "${PROBE_COUNT:-16}" --output-len 64 --step-cost-probe \
            --notes "step-cost probe for plan-under-load: the servers' own steps price the plan's load prediction"
    fi
    args+=(--step-probe "$(cat "$probe_record")")
fi
# The plan, with its load prediction through vLLM's scheduler, is sealed before the load: the
# serving run's manifest keeps it as it was (a resumed run serves the plan it recorded).
plan=$folder/plan.json
$py -m specbench.cli.main plan "${args[@]}" --load-levels "$levels" --json > "$plan"
echo "plan: $plan"
SPECBENCH_RUN_RECORD=$record $py -m specbench.cli.main serve-bench --plan "$plan" \
    --workloads "file:$prompts" --gammas 0,2,4,6 --concurrencies "$levels" --request-rates '' \
    --num-prompts "$count" --output-len 64 \
    --notes "the plan for $count Spec-Bench $category prompts (held out), checked under load"
