"""vLLM's own benchmark client against the server, and the measurement of one load level."""
from __future__ import annotations

import contextlib
import io
import json
import threading
from pathlib import Path

import numpy as np
import pandas as pd

from specbench.measure.serving.config import (
    LOOPBACK,
    METRICS,
    PERCENTILES,
    SLO,
    LoadDefinition,
    workload_file,
)
from specbench.theory.counters import SpecCounters
from specbench.measure.serving.server import (
    RUNNING_TIME,
    LoadSampler,
    Server,
    ServerError,
    histogram_sum,
)
from specbench.measure.workloads import builtin as workloads

__all__ = ["run_client", "custom_dataset", "client_argv", "qualified", "measure_level"]


# -- the client -------------------------------------------------------------------------------

_CLIENT_LOCK = threading.Lock()


def run_client(argv: list[str]) -> dict:
    """vLLM's benchmark client through its Python module; returns its JSON result.

    ``main`` runs its own event loop (asyncio.run), so it is called from a worker thread:
    that also works inside a Jupyter kernel, whose thread already has a running loop. Its
    console report goes to the returned ``_stdout`` field instead of the notebook."""
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve (specbench)")
    serve.add_cli_args(parser)
    args = parser.parse_args(argv)
    box: dict = {}

    def work():
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                box["result"] = serve.main(args)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        box["stdout"] = buffer.getvalue()

    with _CLIENT_LOCK:
        thread = threading.Thread(target=work, name="vllm-bench-serve", daemon=True)
        thread.start()
        thread.join()
    if "error" in box:
        raise box["error"]
    return {**box["result"], "_stdout": box["stdout"]}


def custom_dataset(workload: str, count: int, tokenizer, folder: Path) -> Path:
    """'repeat'/'open' prompts as the client's ``custom`` JSONL, rendered with the chat
    template (the reply is continued, as in the sweep) so the client sends them as they are."""
    path = folder / f"{workload}.jsonl"
    with open(path, "w") as f:
        for i in range(count):
            text = tokenizer.apply_chat_template(workloads.messages(workload, i),
                                                 continue_final_message=True, tokenize=False)
            f.write(json.dumps({"prompt": text}) + "\n")
    return path


def client_argv(server: Server, workload: str, dataset: Path, load: LoadDefinition,
                mode: str, level: float, num_prompts: int, result_dir: Path) -> list[str]:
    """The benchmark client's command line for one level."""
    argv = ["--backend", "openai", "--endpoint", "/v1/completions",
            "--host", LOOPBACK, "--port", str(server.port),
            "--model", server.settings.model, "--tokenizer", server.settings.model,
            "--num-prompts", str(num_prompts), "--output-len", str(load.output_len),
            "--ignore-eos", "--temperature", "0", "--disable-shuffle", "--disable-tqdm",
            "--seed", str(load.seed), "--percentile-metrics", ",".join(METRICS),
            "--metric-percentiles", ",".join(map(str, PERCENTILES)),
            *load.slo.goodput_args(), "--save-result", "--save-detailed",
            "--result-dir", str(result_dir), "--result-filename", "result.json"]
    if workload_file(workload) is not None:
        # An operator's file: the client applies the chat template (one user message and the
        # generation prompt), as the plan's acceptance pass did.
        argv += ["--dataset-name", "custom", "--dataset-path", str(dataset)]
    elif workload in workloads.WORKLOADS:
        argv += ["--dataset-name", "custom", "--dataset-path", str(dataset),
                 "--skip-chat-template"]
        penalty = workloads.sampling(workload).get("repetition_penalty", 1.0)
        if penalty != 1.0:
            argv += ["--repetition-penalty", str(penalty)]
    else:
        argv += ["--dataset-name", "spec_bench", "--dataset-path", str(dataset),
                 "--spec-bench-category", workload]
    if mode == "concurrency":
        argv += ["--max-concurrency", str(int(level)), "--request-rate", "inf"]
    else:
        argv += ["--request-rate", str(level)]
    return argv


# -- one level --------------------------------------------------------------------------------

def qualified(result: dict, slo: SLO) -> pd.DataFrame:
    """Per request: TTFT, TPOT, E2E, output tokens, and whether it met the SLO (the client's
    goodput rule: TTFT ≤ limit and TPOT ≤ limit; TPOT counts as 0 for one-token outputs)."""
    frame = pd.DataFrame({
        "prompt_len": result["input_lens"], "output_len": result["output_lens"],
        "ttft_ms": 1e3 * np.asarray(result["ttfts"], dtype=float),
        "e2el_ms": 1e3 * np.asarray(result["latencies"], dtype=float),
        "chunks": [len(x) + 1 if x else 0 for x in result["itls"]],
        "ok": [not e for e in result["errors"]]})
    n = frame["output_len"].astype(float)
    frame["tpot_ms"] = np.where(n > 1, (frame["e2el_ms"] - frame["ttft_ms"]) / (n - 1).clip(1), 0.0)
    frame["good"] = (frame["ok"] & (frame["ttft_ms"] <= slo.ttft_ms)
                     & (frame["tpot_ms"] <= slo.tpot_ms))
    return frame


def _percentiles(result: dict) -> dict:
    row = {}
    for metric in METRICS:
        row[f"mean_{metric}_ms"] = result.get(f"mean_{metric}_ms")
        for p in PERCENTILES:
            row[f"p{p}_{metric}_ms"] = result.get(f"p{p}_{metric}_ms")
    return row


def _acceptance(result: dict, delta: SpecCounters | None) -> dict:
    """The client's acceptance beside this project's counter reader on the same window."""
    row = {"client_acceptance_rate": np.nan, "client_acceptance_length": np.nan,
           "client_per_position": "", "alpha": np.nan, "mean_acceptance_length": np.nan,
           "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_pos": ""}
    if "spec_decode_acceptance_rate" in result:
        row["client_acceptance_rate"] = result["spec_decode_acceptance_rate"] / 100.0
        row["client_acceptance_length"] = result["spec_decode_acceptance_length"]
        row["client_per_position"] = ";".join(
            f"{r:.6f}" for r in result.get("spec_decode_per_position_acceptance_rates", []))
        row["client_draft_tokens"] = result.get("spec_decode_draft_tokens")
        row["client_accepted_tokens"] = result.get("spec_decode_accepted_tokens")
    if delta is not None:
        row.update(delta.as_row())
        row["alpha"] = delta.acceptance_rate
        row["mean_acceptance_length"] = delta.mean_acceptance_length
    return row


def measure_level(server: Server, workload: str, dataset: Path, load: LoadDefinition,
                  mode: str, level: float, result_dir: Path) -> tuple[dict, pd.DataFrame]:
    """One level of load: counters read around the client, batch sampled and CPU metered
    during it. Raises :class:`ServerError` when the server died or requests failed."""
    argv = client_argv(server, workload, dataset, load, mode, level, load.num_prompts,
                       result_dir)
    text_before = server.metrics_text()
    before = server.counters(text_before)
    with LoadSampler(server) as sampler:
        try:
            result = run_client(argv)
        except Exception as exc:  # named below with the server's state
            _raise_if_dead(server, workload, mode, level, load.num_prompts, exc)
            raise
    _raise_if_dead(server, workload, mode, level, load.num_prompts)
    if result.get("failed"):
        raise ServerError(f"{result['failed']} of {load.num_prompts} requests failed "
                          f"({workload}, {mode} {level:g}, γ={server.settings.gamma}): "
                          f"{next((e for e in result['errors'] if e), '')}"[:2000])
    text_after = server.metrics_text()
    after = server.counters(text_after)
    delta = after - before if before is not None else None
    requests = qualified(result, load.slo)
    good = requests[requests["good"]]
    duration = float(result["duration"])
    starts = np.asarray(result["start_times"], dtype=float)
    ends = starts + np.asarray(result["latencies"], dtype=float)
    window_s = float(ends.max() - starts.min())
    window = sampler.summary(float(starts.min()), float(ends.max()))
    # Little's law: seconds requests spent RUNNING in the engine (vLLM's histogram, every
    # request of the level finished inside the window) over the window = mean running batch.
    running_s = histogram_sum(text_after, RUNNING_TIME) - histogram_sum(text_before, RUNNING_TIME)
    window["mean_running_sampled"] = window.pop("mean_running")
    row = {
        "mode": mode, "concurrency": int(level) if mode == "concurrency" else np.nan,
        "request_rate": float(level) if mode == "rate" else np.nan,
        "num_prompts": load.num_prompts, "completed": result["completed"],
        "failed": result["failed"], "duration_s": duration,
        "output_tokens": int(requests["output_len"].sum()),
        "request_throughput": result["request_throughput"],
        "output_throughput": result["output_throughput"],
        # goodput: requests per second that met the SLO (the client's number) ...
        "goodput": result["request_goodput"],
        "goodput_check": len(good) / duration,
        # ... and the output tokens per second of those requests.
        "qualified_tokens_per_s": float(good["output_len"].sum()) / duration,
        "slo_met_p95": bool(result["p95_ttft_ms"] <= load.slo.ttft_ms
                            and result["p95_tpot_ms"] <= load.slo.tpot_ms),
        "max_concurrent_requests": result.get("max_concurrent_requests"),
        **_percentiles(result), **_acceptance(result, delta),
        "mean_running": running_s / window_s,
        # requests in flight as the client sees them (server queue included)
        "mean_in_flight": float(np.sum(ends - starts)) / window_s,
        "window_s": window_s,
        **window,
    }
    return row, requests


def _raise_if_dead(server: Server, workload, mode, level, n, cause=None) -> None:
    if server.alive():
        return
    raise ServerError(
        f"vLLM server (pid {server.proc.pid}, γ={server.settings.gamma}) exited with code "
        f"{server.proc.returncode} during the load ({workload}, {mode} {level:g}, {n} "
        f"requests){': ' + type(cause).__name__ + ': ' + str(cause)[:300] if cause else ''}; "
        f"log {server.log_path}:\n{server.log_tail(10)}") from cause


