"""Capture the real-format counter fixtures of tests/test_counters.py.

Runs the same three greedy requests (γ=4 n-gram, the 'repeat' workload, 32 tokens) through
the offline engine, dumping ``LLM.get_metrics()``, and through a vLLM OpenAI server on
127.0.0.1, saving the spec-decode families of its ``/metrics`` text. Takes about two minutes:

    .venv/bin/python scripts/capture_counter_fixtures.py
"""
import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

from specbench.engine.assets import embedded_model_dir
from specbench.engine.vllm_engine import Engine, EngineSettings
from specbench.measure.workloads.builtin import messages

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
PORT = 8765
GAMMA, TOKENS = 4, 32
SPEC = {"method": "ngram", "num_speculative_tokens": GAMMA, "prompt_lookup_max": 4,
        "prompt_lookup_min": 2}


def offline(model):
    with Engine(EngineSettings(model=model, gamma=GAMMA)) as engine:
        prompts = [engine.encode_chat(messages("repeat", i)) for i in range(3)]
        engine.generate(prompts, TOKENS)
        dump = []
        for m in engine.llm.get_metrics():
            if m.name.startswith("vllm:spec_decode") or m.name == "vllm:num_requests_running":
                dump.append({"type": type(m).__name__, **asdict(m)})
    (OUT / "get_metrics_v1.json").write_text(json.dumps(dump, indent=1) + "\n")
    return prompts


def server(model, prompts):
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           "--host", "127.0.0.1", "--port", str(PORT), "--dtype", "bfloat16",
           "--enforce-eager", "--no-enable-prefix-caching", "--max-model-len", "2048",
           "--seed", "0", "--speculative-config", json.dumps(SPEC)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            raise RuntimeError("server did not become healthy in 180 s")
        body = json.dumps({"model": model, "prompt": prompts, "max_tokens": TOKENS,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=300).read()
        text = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics",
                                      timeout=10).read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    wanted = ("vllm:spec_decode", "vllm:num_requests_running")
    keep = [line for line in text.splitlines()
            if line.removeprefix("# HELP ").removeprefix("# TYPE ").startswith(wanted)]
    (OUT / "metrics_v1_server.txt").write_text("\n".join(keep) + "\n")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    model = str(embedded_model_dir())
    server(model, offline(model))
    print("wrote", OUT)
