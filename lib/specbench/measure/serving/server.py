"""A real vLLM OpenAI server on 127.0.0.1: its life, its metrics and the CPU load beside it."""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
from prometheus_client.parser import text_string_to_metric_families

from specbench.engine import lifeline, step_records
from specbench.engine.counters import from_prometheus_text
from specbench.engine.vllm_engine import EngineSettings, on_gpu
from specbench.measure.serving.config import LOOPBACK
from specbench.theory.counters import SpecCounters

__all__ = ["ServerError", "free_port", "Server", "gauge", "RUNNING_TIME", "ROLES", "histogram_sum",
           "LoadSampler"]


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
        # The speculative configuration the offline engine gets, so a server and a sweep of one
        # setting speculate alike (n-gram lookup and its batch-size schedule, or a draft model).
        speculative = s.llm_kwargs().get("speculative_config")
        if speculative:
            cmd += ["--speculative-config", json.dumps(speculative)]
        return cmd

    def env(self) -> dict:
        env = dict(os.environ)
        if not on_gpu():
            # The default (0.92 of NUMA node 0's memory) is refused at start-up here.
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.settings.cpu_kvcache_gib))
        # One record per engine step where the settings ask (vLLM plugin
        # specbench.engine.step_records); never a value left by an earlier engine.
        env.pop(step_records.ENV, None)
        if getattr(self.settings, "step_records", None):
            env[step_records.ENV] = self.settings.step_records
        # The server's engine core and worker die with their parents (vLLM plugin
        # specbench.engine.lifeline); this process is the harness they die with.
        return lifeline.arm(env)

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

    def kv_cache(self, text: str | None = None) -> dict:
        """The KV cache the engine allocated, from its ``vllm:cache_config_info`` labels: its
        bytes and the tokens they hold (a draft model's layers take their share of both)."""
        for family in text_string_to_metric_families(text or self.metrics_text()):
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info":
                    labels = sample.labels
                    try:
                        tokens = int(labels["kv_cache_size_tokens"])
                        size = int(labels["kv_cache_memory_bytes"])
                    except (KeyError, ValueError):
                        break
                    return {"tokens": tokens, "bytes": size,
                            "bytes_per_token": size / tokens if tokens else None}
        return {"tokens": None, "bytes": None, "bytes_per_token": None,
                "note": "this vLLM's /metrics has no kv_cache_size_tokens/kv_cache_memory_bytes"}

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


