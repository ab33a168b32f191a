#!/usr/bin/env bash
# Draft models on this host (issue 47): for each draft depth K, a 'draft-sweep' of the target
# drafting with its first K layers (vLLM method draft_model; γ 0/2/4, batches 1 and 4, the
# paired γ=0 baseline, 'repeat', 'edit' and two Spec-Bench categories; acceptance from the
# engine's counters), then the draft alone as its own engine on the same prompts (γ=0: its
# step time over the target's is Leviathan's c).
#
#   scripts/measure_drafts.sh                 DEPTHS="4 20" PROMPTS=1 REPS=3
#   DRAFT_ENGINE=transformers scripts/measure_drafts.sh
#
# DRAFT_ENGINE=transformers measures the same drafts on the second engine, transformers' assisted
# generation (assistant_model, a constant γ): batch 1 only (transformers refuses assisted
# generation above it), no prefix cache (a vLLM setting); its runs' SKU ids end in '-hf'.
#
# A killed run resumes: `specbench sweep --resume RUN` (the folder is printed as it starts).
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
workloads=${WORKLOADS:-repeat,edit,specbench:summarization,specbench:qa}
grid=(--workloads "$workloads" --prompts "${PROMPTS:-1}" --reps "${REPS:-3}" --max-tokens 64)
if [ "${DRAFT_ENGINE:-vllm}" = transformers ]; then
    grid+=(--engine transformers --batches 1)
else
    grid+=(--batches 1,4 --prefix-caching)
fi
[ -n "${DTYPE:-}" ] && grid+=(--dtype "$DTYPE")
for depth in ${DEPTHS:-4 20}; do
    $py -m specbench.cli.main sweep --draft-depth "$depth" --gammas 0,2,4 "${grid[@]}" \
        --notes "draft model: the first $depth decoder layers (make measure-drafts)"
    draft=$($py -m specbench.cli.main draft --depth "$depth" | cut -f1)
    $py -m specbench.cli.main sweep --model "$draft" --gammas 0 "${grid[@]}" \
        --notes "the depth-$depth draft alone, as its own engine (make measure-drafts)"
done
