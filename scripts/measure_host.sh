#!/usr/bin/env bash
# The host as the unit of evidence: this host's own `make book` run is the calibration.
#
#   scripts/measure_host.sh            (after `make book` on this machine, same boot)
#   PROMPTS=2 REPS=3 scripts/measure_host.sh
#
# `specbench predict` seals, from that calibration (its step cost per γ and batch, its kernel
# microbenchmark) and acceptance lent per prompt by other hosts, the speedup of every Spec-Bench
# category × γ × batch; only then does the Spec-Bench sweep on this host start, judged against
# the sealed run. A calibration from another boot is another host session and is refused.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
read -r calibration microbench dtype < <($py scripts/host_calibration.py)
args=(--calibration "$calibration")
[ "$microbench" != - ] && args+=(--microbench "$microbench")
predicted=$($py -m specbench.cli.main predict "${args[@]}")
prediction=${predicted%%$'\n'*}
echo "sealed: $prediction"
categories=specbench:multi-turn,specbench:translation,specbench:summarization,specbench:qa,specbench:math_reasoning,specbench:rag
$py -m specbench.cli.main sweep --workloads "$categories" --prompts "${PROMPTS:-2}" \
    --gammas 0,2,6 --batches 1,4 --max-tokens 64 --reps "${REPS:-3}" --dtype "$dtype" \
    --prefix-caching --judged-against "$prediction" \
    --notes "Spec-Bench sweep judged against $prediction, sealed from this host's make book run"
