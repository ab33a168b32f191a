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
read -r calibration microbench < <($py - <<'PY'
from specbench.engine.hardware import host_fingerprint
from specbench.store.runs import load_runs
boot = host_fingerprint()["boot_id"]
def here(r):
    return (r.manifest.get("host") or {}).get("boot_id") == boot
book = [r for r in load_runs(kind="sweep") if here(r)
        and sorted(r.manifest["grid"]["workloads"]) == ["edit", "open", "repeat"]]
if not book:
    raise SystemExit("plan_under_load.sh: no `make book` sweep of this host session (this "
                     "boot) in runs/: run `make book` first")
cal = book[-1]
micro = [r for r in load_runs(kind="microbench") if here(r) and r.sku == cal.sku]
print(cal.path, micro[-1].path if micro else "-")
PY
)
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
