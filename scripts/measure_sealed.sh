#!/usr/bin/env bash
# A SKU measured against a sealed prediction (issue: transfer that can fail).
#
#   scripts/measure_sealed.sh [THREADS] [DTYPE]
#   PROMPTS=8 REPS=5 CAL_REPS=3 WORKLOADS=... scripts/measure_sealed.sh 1 float32
#
# The SKU is this CPU with THREADS engine threads and DTYPE: with one thread, vLLM's default
# binding (one core reserved; on a 2-core machine, one thread on core 0), with more bound to
# cores 0..THREADS-1, none reserved. Its
# calibration — the kernel microbenchmark and a sweep of the γ=0 arm — comes first;
# `specbench predict` then seals the predicted latency of every speculative cell from the
# other SKUs in the store; only then does the SKU's sweep start, judged against that run.
# How long it takes: the timing table in book/reproduce.md.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
dtype=${2:-bfloat16}
py=.venv/bin/python
workloads=${WORKLOADS:-repeat,open,edit,specbench:multi-turn,specbench:summarization,specbench:qa}
grid=(--workloads "$workloads" --batches 1,4 --prompts "${PROMPTS:-4}" --max-tokens 64
      --dtype "$dtype")
if [ "$threads" -gt 1 ]; then
  export VLLM_CPU_OMP_THREADS_BIND="0-$((threads - 1))" VLLM_CPU_NUM_OF_RESERVED_CPU=0
fi

$py -m specbench.cli.main microbench --dtype "$dtype"
calibration=$($py -m specbench.cli.main sweep --gammas 0 "${grid[@]}" --reps "${CAL_REPS:-2}" \
    --notes "calibration for a sealed prediction: the γ=0 arm only ($threads engine threads)" | tail -1)
# The first line of predict's output is the run's folder (not `| head -1`: closing the pipe
# early makes predict's second print fail, after the run is already sealed).
predicted=$($py -m specbench.cli.main predict --calibration "$calibration")
prediction=${predicted%%$'\n'*}
$py -m specbench.cli.main sweep --gammas 0,2,4,6 "${grid[@]}" --reps "${REPS:-2}" \
    --judged-against "$prediction" \
    --notes "judged against the sealed prediction $prediction ($threads engine threads)"
