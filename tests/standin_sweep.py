"""The sweep's bookkeeping with a stand-in for the engine (no vLLM, fixed numbers), importable
by tests and runnable as ``python tests/standin_sweep.py <specbench cli args>`` so that a test
can kill a real process at a named fault point. What is tested is the harness (parts, resume,
finalize, messages); tests/test_engine.py runs the same paths with the real engine.

``STANDIN_FAIL=start`` makes every engine fail to start (the all-failed sweep).
"""
import os
import sys
from pathlib import Path

from specbench.engine.vllm_engine import Generation
from specbench.theory.counters import SpecCounters



def staggered_timeline(n: int, max_tokens: int, prefill_step_s: float = 0.5,
                       decode_step_s: float = 0.1):
    """A batch whose request *j* finishes prefill in step *j*: until the last request's first
    token every step also carries a prefill and takes ``prefill_step_s``; after it, pure decode
    steps take ``decode_step_s``. Every request emits one token per step once it decodes."""
    times, counts, now, tokens, step = [], [], 0.0, [0] * n, 0
    while min(tokens) < max_tokens:
        now += prefill_step_s if step < n else decode_step_s
        tokens = [min(max_tokens, c + 1) if j <= step else c for j, c in enumerate(tokens)]
        times.append(now)
        counts.append(list(tokens))
        step += 1
    return times, counts


class StandInEngine:
    startup_s = 0.0
    staggered = False     # True: batched calls carry a staggered-prefill step timeline

    def __init__(self, settings):
        if os.environ.get("STANDIN_FAIL") == "start":
            raise RuntimeError(f"stand-in engine for γ={settings.gamma} would not start")
        self.settings = settings
        self.total = SpecCounters(0, 0, 0, ())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def close(self):
        pass

    def encode_chat(self, messages, continue_final=True):
        return [1, 2, 3]

    def generate(self, prompts, max_tokens, sampling=None, read_counters=True):
        g = self.settings.gamma
        max_tokens = max_tokens[0] if isinstance(max_tokens, list) else max_tokens
        delta = SpecCounters(10, 10 * g, 8 * g, (8,) * g) if g else None
        if delta:
            self.total = SpecCounters(self.total.drafts + 10, self.total.draft_tokens + 10 * g,
                                      self.total.accepted_tokens + 8 * g, ())
        n = len(prompts)
        times, counts = staggered_timeline(n, max_tokens) if self.staggered else (None, None)
        decode_s = ([times[-1] - times[j] for j in range(n)] if times
                    else [0.9 / (1 + g)] * n)
        return Generation(wall_s=1.0, ttft_s=[0.1] * n, decode_s=decode_s,
                          output_tokens=[max_tokens] * n, token_ids=[[5] * max_tokens] * n,
                          texts=["x"] * n, counters=delta,
                          counters_after=self.total if g else None, iterations=None,
                          step_times=times, step_counts=counts)


def stand_in_contract(kind, model, dtype):
    return {"kind": kind, "sku": "cpu-test-1t-bfloat16", "code": {"revision": "x"},
            "model": {"name": "m", "path": model, "weights_sha256": "a", "tokenizer_sha256": "b"},
            "engine": {"name": "stand-in", "version": "0", "settings": {}}, "hardware": {},
            "dtype": dtype}


def install(monkeypatch=None):
    """Replace the engine and the contract (no roofline microbenchmark) in the sweep."""
    from specbench.measure import sweep
    if monkeypatch is None:
        sweep.Engine, sweep.contract = StandInEngine, stand_in_contract
    else:
        monkeypatch.setattr(sweep, "Engine", StandInEngine)
        monkeypatch.setattr(sweep, "contract", stand_in_contract)


def model_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(
        '{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
        '"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}')
    (path / "tokenizer.json").write_text("{}")
    return path


if __name__ == "__main__":
    install()
    from specbench.cli.main import main
    sys.exit(main(sys.argv[1:]))
