"""The host floor: split a decode step into compute time and host-exposed time.

**Differencing.** The same decode is profiled twice, generating 1 and N tokens. Everything
paid once per call — engine warmup, scheduling of the request, prefill, load — appears in both
and cancels in the difference; what remains is N−1 decode steps. Dividing by N−1 gives the
per-step wall time and the per-step compute time; the host-exposed time is their difference.

* **CPU** (runs here): the same multi-process vLLM engine the sweep times, with vLLM's own
  torch profiler in the engine-core worker (``profiler_config``); "compute" is the summed
  self time of the worker's operators in the families of :data:`COMPUTE_FAMILIES` (one
  place, tested). Wall time is taken by the caller around the call, so host-exposed time
  includes the scheduler, the inter-process hops and the output processing.
* **GPU** (nsys): the paper's method. :func:`nsys_command` traces the whole vLLM process tree,
  "compute" is the summed GPU kernel time, read from ``nsys stats`` CSV
  (:func:`read_kernel_summary_csv`) or the SQLite export (:func:`read_kernel_sqlite`).
"""
from __future__ import annotations

import csv
import io
import math
import re
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["COMPUTE_FAMILIES", "classify", "StepProfile", "difference", "profile_cpu_decode",
           "nsys_available", "nsys_command", "nsys_stats_command", "read_kernel_summary_csv",
           "read_kernel_sqlite", "NsysFormatError", "random_weight_model"]

# Operator families, matched in order against the profiler's operator names. Everything a
# family lists is arithmetic on tensors; "compute" is the sum of these families' self time.
# Unmatched operators (copies, views, allocation, indexing, Python-side glue) count as host:
# they are the per-step bookkeeping the paper calls the host/scheduler term.
COMPUTE_FAMILIES: dict[str, str] = {
    "matmul": r"\b(mm|addmm|bmm|matmul|linear|gemm|onednn|dnnl|mkl|brgemm)\b|_mm\b|gemm|onednn",
    "attention": r"attention|attn|sdpa|flash|paged",
    "normalisation": r"norm",
    "activation": r"silu|gelu|relu|act_and_mul|sigmoid",
    "rotary": r"rotary|rope",
    "embedding": r"embedding",
    "sampling": r"argmax|topk|top_k|sort|softmax|sample|multinomial|logits",
    "elementwise": r"aten::(add|mul|sub|div|rsqrt|pow|exp|neg|mean|sum|max|min|where|clamp)_?$",
}
HOST_FAMILY = "host/other"
OUTSIDE_OPERATORS = "host: outside any operator"
_COMPILED = [(name, re.compile(pattern, re.IGNORECASE)) for name, pattern in COMPUTE_FAMILIES.items()]


def classify(op_name: str) -> str:
    """The family of one profiler operator name (``HOST_FAMILY`` when none matches)."""
    for family, pattern in _COMPILED:
        if pattern.search(op_name):
            return family
    return HOST_FAMILY


@dataclass(frozen=True)
class StepProfile:
    """Totals of one profiled call generating ``tokens`` tokens (milliseconds)."""
    tokens: int
    wall_ms: float
    families_ms: dict[str, float]

    @property
    def compute_ms(self) -> float:
        return sum(v for k, v in self.families_ms.items() if k != HOST_FAMILY)


def difference(short: StepProfile, long: StepProfile) -> dict:
    """Per-step decomposition from two profiles of the same decode (1 and N tokens)."""
    steps = long.tokens - short.tokens
    if steps <= 0:
        raise ValueError(f"the long profile must generate more tokens than the short one, got "
                         f"{long.tokens} and {short.tokens}")
    wall = (long.wall_ms - short.wall_ms) / steps
    compute = (long.compute_ms - short.compute_ms) / steps
    families = {f: (long.families_ms.get(f, 0.0) - short.families_ms.get(f, 0.0)) / steps
                for f in sorted(set(long.families_ms) | set(short.families_ms))}
    return {"steps": steps, "wall_ms": wall, "compute_ms": compute,
            "host_ms": wall - compute, "host_share": (wall - compute) / wall,
            "families_ms": families}


# -- CPU: vLLM's torch profiler in the engine-core worker ------------------------------------

def self_times(trace_events: list[dict]) -> dict[str, float]:
    """Self time in ms per operator name from Chrome-trace ``cpu_op`` events.

    Operators nest (``aten::linear`` calls ``aten::addmm``); an operator's self time is its
    duration less that of the operators directly inside it, per thread."""
    ops = sorted((e for e in trace_events if e.get("ph") == "X" and e.get("cat") == "cpu_op"),
                 key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    totals: dict[str, float] = {}
    stack: list[list] = []  # [end, name, self_us, thread]
    for event in ops:
        thread, start, end = (event["pid"], event["tid"]), event["ts"], event["ts"] + event["dur"]
        while stack and (stack[-1][3] != thread or stack[-1][0] <= start):
            _, name, own, _ = stack.pop()
            totals[name] = totals.get(name, 0.0) + own
        if stack:
            stack[-1][2] -= event["dur"]
        stack.append([end, event["name"], float(event["dur"]), thread])
    for _, name, own, _ in stack:
        totals[name] = totals.get(name, 0.0) + own
    return {name: us / 1e3 for name, us in totals.items()}


def read_trace(path: Path) -> list[dict]:
    """The events of a torch profiler Chrome trace (``.json`` or ``.json.gz``)."""
    import gzip
    import json

    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            return json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: not a torch profiler Chrome trace ({exc})") from exc


def _wait_until_quiet(folder: Path, deadline: float, quiet_s: float = 1.5) -> None:
    """Wait until no file in ``folder`` has changed for ``quiet_s``: the worker writes the
    trace and its summary table after stop_profile returns, and a timed call must not
    overlap that work."""
    import time

    while time.time() < deadline:
        newest = max((p.stat().st_mtime for p in folder.iterdir()), default=0.0)
        if time.time() - newest > quiet_s:
            return
        time.sleep(0.3)


def profile_cpu_decode(engine, prompt_ids: list[int], tokens: int, timeout_s: float = 120):
    """Profile one greedy call of ``tokens`` new tokens in the engine's worker."""
    import time

    trace_dir = Path(engine.settings.profiler_dir)
    before = set(trace_dir.glob("*.json*"))
    engine.llm.start_profile()
    start = time.perf_counter()
    engine.generate([prompt_ids], tokens, read_counters=False)
    wall = time.perf_counter() - start
    engine.llm.stop_profile()
    deadline = time.time() + timeout_s
    while not (new := sorted(set(trace_dir.glob("*.json*")) - before)):
        if time.time() > deadline:
            raise TimeoutError(f"{trace_dir}: the profiler wrote no trace in {timeout_s} s")
        time.sleep(0.2)
    _wait_until_quiet(trace_dir, deadline)
    families: dict[str, float] = {}
    for name, ms in self_times(read_trace(new[-1])).items():
        family = classify(name)
        families[family] = families.get(family, 0.0) + ms
    for path in new:
        path.unlink()
    return StepProfile(tokens, 1e3 * wall, families)


def random_weight_model(shape: dict, tokenizer_from: Path, folder: Path) -> Path:
    """A checkpoint folder with a config of ``shape`` and no weights, for vLLM's
    ``load_format="dummy"`` (random weights): timing only, never acceptance."""
    import json
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads((Path(tokenizer_from) / "config.json").read_text())
    config.update(shape)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json"):
        if (Path(tokenizer_from) / name).exists():
            shutil.copy(Path(tokenizer_from) / name, folder / name)
    return folder


# -- GPU: nsys -------------------------------------------------------------------------------

class NsysFormatError(ValueError):
    """An nsys report that cannot be read; the message names the file."""


def nsys_available() -> bool:
    return shutil.which("nsys") is not None


def nsys_command(output: str, command: list[str]) -> list[str]:
    """Trace a vLLM process tree: the EngineCore runs in a forked child, and CUDA graphs (if
    any) are traced node by node."""
    return ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--trace-fork-before-exec=true",
            "--cuda-graph-trace=node", "--force-overwrite=true", "-o", output, *command]


def nsys_stats_command(report: str, prefix: str, legacy: bool = False) -> list[str]:
    """Kernel summary as CSV (``cuda_gpu_kern_sum``; ``gpukernsum`` on older nsys)."""
    name = "gpukernsum" if legacy else "cuda_gpu_kern_sum"
    return ["nsys", "stats", "--report", name, "--format", "csv", "--output", prefix, report]


def read_kernel_summary_csv(path: Path) -> float:
    """Total GPU kernel time in ms from an ``nsys stats`` kernel-summary CSV (either report)."""
    path = Path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise NsysFormatError(f"{path}: not a text CSV ({exc})") from exc
    # nsys may print notices before the header; the table starts at the 'Time' column header.
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Total Time" in line), None)
    if start is None:
        raise NsysFormatError(f"{path}: no 'Total Time (ns)' column — not an nsys kernel "
                              "summary (cuda_gpu_kern_sum or gpukernsum)")
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    rows = list(reader)
    column = next((c for c in reader.fieldnames or [] if c and c.startswith("Total Time")),
                  None)
    if column is None:
        raise NsysFormatError(f"{path}: line {start + 1}: no column named 'Total Time (ns)' "
                              "in the header")
    if not rows:
        raise NsysFormatError(f"{path}: the kernel summary has no rows")
    total = 0.0
    for n, row in enumerate(rows, start=start + 2):
        try:
            value = float(row[column])
        except (TypeError, ValueError) as exc:
            raise NsysFormatError(f"{path}: line {n}: {column!r} is not a number: "
                                  f"{row[column]!r}") from exc
        if not math.isfinite(value) or value < 0:
            raise NsysFormatError(f"{path}: line {n}: {column!r} is {row[column]!r}, not a "
                                  "time >= 0")
        total += value
    scale = 1e-6 if "(ns)" in column else (1e-3 if "(us)" in column else 1.0)
    return total * scale


def read_kernel_sqlite(path: Path) -> float:
    """Total GPU kernel time in ms from an nsys SQLite export."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such nsys SQLite export")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            (total,) = db.execute(
                "SELECT COALESCE(SUM(k.end - k.start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.shortName").fetchone()
    except sqlite3.DatabaseError as exc:
        raise NsysFormatError(f"{path}: not an nsys SQLite export with "
                              f"CUPTI_ACTIVITY_KIND_KERNEL and StringIds ({exc})") from exc
    return total / 1e6


def run_nsys(output: Path, command: list[str]) -> tuple[float, str]:
    """Run ``command`` under nsys; return its total kernel time in ms and its stdout."""
    done = subprocess.run(nsys_command(str(output), command), check=True, capture_output=True,
                          text=True)
    prefix = str(output) + "_kern"
    subprocess.run(nsys_stats_command(str(output) + ".nsys-rep", prefix), check=True,
                   capture_output=True)
    summaries = sorted(Path(output).parent.glob(Path(prefix).name + "*.csv"))
    if not summaries:
        raise NsysFormatError(f"{prefix}*.csv: nsys stats wrote no kernel summary")
    return read_kernel_summary_csv(summaries[0]), done.stdout


def profile_gpu_decode(model: str, load_format: str, tokens: int, folder: Path) -> StepProfile:
    """One child process under nsys generating ``tokens`` tokens; compute = kernel time.

    The child's engine start and warmup kernels are in every profile and cancel in the
    difference, as in the paper."""
    import json
    import sys

    command = [sys.executable, "-m", "specbench.hostfloor", "--child", "--model", model,
               "--load-format", load_format, "--tokens", str(tokens)]
    kernels_ms, stdout = run_nsys(folder / f"decode-{tokens}", command)
    wall_ms = json.loads(stdout.strip().splitlines()[-1])["wall_ms"]
    return StepProfile(tokens, wall_ms, {"gpu kernels": kernels_ms, HOST_FAMILY: 0.0})


def _child(argv=None) -> None:
    """Entry of the profiled child: one warm engine, one timed call, wall time as JSON."""
    import argparse
    import json

    from . import workloads
    from .engine import Engine, EngineSettings

    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--model", required=True)
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--tokens", type=int, required=True)
    args = parser.parse_args(argv)
    with Engine(EngineSettings(model=args.model, load_format=args.load_format)) as engine:
        prompt = engine.encode_chat(workloads.messages("repeat", 0))
        engine.generate([prompt], 8, read_counters=False)
        gen = engine.generate([prompt], args.tokens, read_counters=False)
    print(json.dumps({"wall_ms": 1e3 * gen.wall_s}))


# -- the measurement ------------------------------------------------------------------------

# A larger member of the same family: the published SmolLM2-1.7B shape (config.json of
# HuggingFaceTB/SmolLM2-1.7B-Instruct), about 12x the parameters of the 135M default.
LARGE_SHAPE = {"num_hidden_layers": 24, "hidden_size": 2048, "intermediate_size": 8192,
               "num_attention_heads": 32, "num_key_value_heads": 32}


def _cpu_profiles(path: str, load_format: str, tokens: int, reps: int, traces: Path):
    """(rep, tokens, profile, unprofiled wall ms, foreign cores) from one warm CPU engine."""
    from . import workloads
    from .engine import Engine, EngineSettings
    from .load import ForeignCpu

    settings = EngineSettings(model=path, gamma=0, load_format=load_format,
                              profiler_dir=str(traces))
    with Engine(settings) as engine:
        prompt = engine.encode_chat(workloads.messages("repeat", 0))
        engine.generate([prompt], 8, read_counters=False)          # warm every path
        for rep in range(reps):
            for n in (1, tokens):
                with ForeignCpu() as foreign:
                    plain = engine.generate([prompt], n, read_counters=False)
                    prof = profile_cpu_decode(engine, prompt, n)
                yield rep, n, prof, 1e3 * plain.wall_s, foreign.foreign_cores


def _gpu_profiles(path: str, load_format: str, tokens: int, reps: int, traces: Path):
    """The same tuples from nsys-profiled child processes (the profiled wall is the wall)."""
    for rep in range(reps):
        for n in (1, tokens):
            prof = profile_gpu_decode(path, load_format, n, traces)
            yield rep, n, prof, prof.wall_ms, 0.0


def run_host_floor(tokens: int = 64, reps: int = 3, root=None, progress: bool = True,
                   large_shape: dict | None = None):
    """Profile the embedded model and a random-weight larger one at 1 and ``tokens`` new
    tokens, ``reps`` times each; write a ``hostfloor`` run and return it (left open, so the
    executed notebook can be added before ``run.finish()``)."""
    import os
    import tempfile

    import pandas as pd
    from tqdm import tqdm

    from .assets import cache_dir, embedded_model_dir
    from .contract import contract, model_shape
    from .engine import on_gpu
    from .runs import DEFAULT_ROOT, create_run

    if tokens < 2 or reps < 1:
        raise ValueError(f"tokens must be >= 2 and reps >= 1, got {tokens}, {reps}")
    gpu = on_gpu()
    if gpu and not nsys_available():
        raise RuntimeError("on a GPU the host floor is measured with nsys, which is not on "
                           "PATH: install NVIDIA Nsight Systems (the CPU profiler would time "
                           "the host, not the kernels)")
    embedded = str(embedded_model_dir())
    large = random_weight_model(large_shape or LARGE_SHAPE, Path(embedded),
                                cache_dir() / "models" / "smollm2-1.7b-shape-random")
    models = [("SmolLM2-135M (pretrained)", embedded, "auto"),
              ("SmolLM2-1.7B shape (random weights)", str(large), "dummy")]
    manifest = contract("hostfloor", embedded, "bfloat16")
    manifest.update(
        grid={"tokens": [1, tokens], "reps": reps, "workload": "repeat", "batch": 1,
              "gamma": 0, "method": "difference of totals at 1 and N tokens; compute = self "
                                    "time of compute-family operators in vLLM's torch "
                                    "profiler of the engine-core worker; wall = caller's "
                                    "clock around the call"},
        models=[{"label": label, "path": path,
                 "weights": "pretrained" if fmt == "auto" else
                            "random (vLLM load_format=dummy): timing only, never acceptance",
                 "shape": model_shape(path, "bfloat16")} for label, path, fmt in models],
        compute_families=COMPUTE_FAMILIES,
        load={"loadavg_at_start": os.getloadavg()})
    run = create_run(Path(root or DEFAULT_ROOT), manifest)
    steps, families = [], []
    bar = tqdm(total=len(models) * reps, desc="host floor", unit="rep", disable=not progress)
    measure = _gpu_profiles if gpu else _cpu_profiles
    with tempfile.TemporaryDirectory(prefix="specbench-traces-") as traces:
        for label, path, fmt in models:
            for rep, n, prof, unprofiled_ms, foreign_cores in measure(path, fmt, tokens, reps,
                                                                      Path(traces)):
                steps.append({"model": label, "tokens": n, "rep": rep,
                              "wall_ms": prof.wall_ms, "compute_ms": prof.compute_ms,
                              "unprofiled_wall_ms": unprofiled_ms,
                              "foreign_cores": foreign_cores})
                families += [{"model": label, "tokens": n, "rep": rep, "family": f,
                              "self_ms": ms} for f, ms in prof.families_ms.items()]
                if n == tokens:
                    bar.update()
    bar.close()
    run.write_table("steps.csv", pd.DataFrame(steps))
    run.write_table("families.csv", pd.DataFrame(families))
    run.update_manifest(load={**run.manifest["load"], "loadavg_at_end": os.getloadavg()})
    return run


def decompose(steps, families) -> tuple:
    """Per-step decomposition per model (median over repetitions) and family shares."""
    import pandas as pd

    rows, shares = [], []
    for (model, rep), g in steps.groupby(["model", "rep"]):
        short, long = g.loc[g["tokens"].idxmin()], g.loc[g["tokens"].idxmax()]
        fam = families[(families["model"] == model) & (families["rep"] == rep)]
        by = {n: dict(zip(f["family"], f["self_ms"])) for n, f in fam.groupby("tokens")}
        d = difference(StepProfile(int(short["tokens"]), short["wall_ms"], by.get(short["tokens"], {})),
                       StepProfile(int(long["tokens"]), long["wall_ms"], by.get(long["tokens"], {})))
        unprofiled = (long["unprofiled_wall_ms"] - short["unprofiled_wall_ms"]) / d["steps"]
        rows.append({"model": model, "rep": rep, "wall_ms": d["wall_ms"],
                     "compute_ms": d["compute_ms"], "host_ms": d["host_ms"],
                     "unprofiled_wall_ms": unprofiled})
        shares += [{"model": model, "rep": rep, "family": f, "ms": ms}
                   for f, ms in d["families_ms"].items()]
    per_step = pd.DataFrame(rows).groupby("model").median(numeric_only=True).drop(columns="rep")
    per_step["host_share"] = per_step["host_ms"] / per_step["wall_ms"]
    fam = pd.DataFrame(shares).groupby(["model", "family"])["ms"].median().reset_index()
    # Time inside no profiled operator (Python scheduling, inter-process hops, output
    # processing) is host-exposed too; shares are of the per-step wall time.
    outside = (per_step["wall_ms"] - fam.groupby("model")["ms"].sum()).rename("ms").reset_index()
    fam = pd.concat([fam, outside.assign(family=OUTSIDE_OPERATORS)], ignore_index=True)
    fam["share"] = fam["ms"] / fam["model"].map(per_step["wall_ms"])
    return per_step.reset_index(), fam
