"""The host floor: split a decode step into compute time and host-exposed time.

The measurement and the public API; the parts live in their own modules and are re-exported
here, so ``specbench.measure.hostfloor.<name>`` keeps working:

* :mod:`specbench.derive.decompose` — differencing of a 1-token and an N-token profile
  (:class:`StepProfile`, :func:`difference`, :func:`decompose`);
* :mod:`specbench.measure.profiler` — **CPU**: vLLM's own torch profiler in the engine-core worker;
  "compute" is the self time of the operators in :data:`COMPUTE_FAMILIES`;
* :mod:`specbench.measure.nsys` — **GPU**: the paper's method; each profile is one child process
  (``python -m specbench.measure.hostfloor --child``) under ``nsys profile``, "compute" is its
  summed GPU kernel time, the wall is the child's clock around the timed call.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from specbench.derive.decompose import (HOST_FAMILY, OUTSIDE_OPERATORS, StepProfile, decompose,
                                        difference)
from specbench.measure.nsys import (NSYS_ENV, NsysFormatError, nsys_available, nsys_command,
                                    nsys_stats_command, read_kernel_sqlite,
                                    read_kernel_summary_csv, run_nsys)
from specbench.measure.profiler import (COMPUTE_FAMILIES, classify, profile_cpu_decode,
                                        read_trace, self_times)

__all__ = ["COMPUTE_FAMILIES", "classify", "StepProfile", "difference", "decompose",
           "profile_cpu_decode", "profile_gpu_decode", "nsys_available", "nsys_command",
           "nsys_stats_command", "read_kernel_summary_csv", "read_kernel_sqlite",
           "NsysFormatError", "random_weight_model", "run_host_floor", "method", "HOST_FAMILY",
           "OUTSIDE_OPERATORS", "self_times", "read_trace", "NSYS_ENV", "run_nsys"]


def random_weight_model(shape: dict, tokenizer_from: Path, folder: Path) -> Path:
    """A checkpoint folder with a config of ``shape`` and no weights, for vLLM's
    ``load_format="dummy"`` (random weights): timing only, never acceptance."""
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads((Path(tokenizer_from) / "config.json").read_text())
    config.update(shape)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                 "generation_config.json"):
        if (Path(tokenizer_from) / name).exists():
            shutil.copy(Path(tokenizer_from) / name, folder / name)
    return folder


# -- GPU: one nsys-profiled child process per profile --------------------------------------

def report_name(label: str, rep: int, tokens: int) -> str:
    """A report name of its own for every (model, repetition, tokens): nsys must never find
    an earlier profile's report or SQLite export under the name it is asked to write."""
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    return f"{slug}-rep{rep}-decode{tokens}"


def child_command(model: str, load_format: str, tokens: int, result: Path) -> list[str]:
    return [sys.executable, "-m", "specbench.measure.hostfloor", "--child", "--model", model,
            "--load-format", load_format, "--tokens", str(tokens), "--result", str(result)]


def profile_gpu_decode(model: str, load_format: str, tokens: int, folder: Path,
                       name: str | None = None) -> StepProfile:
    """One child process under nsys generating ``tokens`` tokens; compute = kernel time.

    The child's engine start and warmup kernels are in every profile and cancel in the
    difference, as in the paper."""
    output = Path(folder) / (name or f"decode-{tokens}")
    result = output.with_name(output.name + ".result.json")
    kernels_ms, child = run_nsys(output, child_command(model, load_format, tokens, result),
                                 result)
    if child.get("tokens") not in (None, tokens):
        raise RuntimeError(f"{result}: the child generated {child.get('tokens')} tokens, "
                           f"{tokens} were asked")
    return StepProfile(tokens, float(child["wall_ms"]),
                       {"gpu kernels": kernels_ms, HOST_FAMILY: 0.0})


def child_main(argv=None) -> int:
    """Entry of the profiled child: one warm engine, one timed call; the wall time goes to
    ``--result`` as JSON (nsys prints on stdout too, so stdout is no channel)."""
    import argparse

    from specbench.measure.workloads import builtin as workloads
    from specbench.engine.vllm_engine import Engine, EngineSettings

    parser = argparse.ArgumentParser(
        prog="python -m specbench.measure.hostfloor",
        description="The host floor's profiled child (run under nsys by run_host_floor).")
    parser.add_argument("--child", action="store_true", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--tokens", type=int, required=True)
    parser.add_argument("--result", required=True, help="JSON file the wall time goes to")
    args = parser.parse_args(argv)
    if args.tokens < 1:
        parser.error(f"--tokens must be >= 1, got {args.tokens}")
    with Engine(EngineSettings(model=args.model, load_format=args.load_format)) as engine:
        prompt = engine.encode_chat(workloads.messages("repeat", 0))
        engine.generate([prompt], 8, read_counters=False)
        gen = engine.generate([prompt], args.tokens, read_counters=False)
    Path(args.result).write_text(json.dumps({"wall_ms": 1e3 * gen.wall_s, "tokens": args.tokens,
                                             "output_tokens": gen.output_tokens[0]}))
    return 0


def method(gpu: bool) -> str:
    """The manifest's one-line description of how the floor was measured."""
    if gpu:
        return ("difference of totals at 1 and N tokens; each profile one child process under "
                "nsys profile (whole process tree, VLLM_WORKER_MULTIPROC_METHOD=spawn); "
                "compute = summed GPU kernel time from nsys stats cuda_gpu_kern_sum "
                "(--force-export=true, one report per profile); wall = the child's clock "
                "around the timed call")
    return ("difference of totals at 1 and N tokens; compute = self time of compute-family "
            "operators in vLLM's torch profiler of the engine-core worker; wall = caller's "
            "clock around the call")


# -- the measurement ------------------------------------------------------------------------

# A larger member of the same family: the published SmolLM2-1.7B shape (config.json of
# HuggingFaceTB/SmolLM2-1.7B-Instruct), about 12x the parameters of the 135M default.
LARGE_SHAPE = {"num_hidden_layers": 24, "hidden_size": 2048, "intermediate_size": 8192,
               "num_attention_heads": 32, "num_key_value_heads": 32}


def _cpu_profiles(path: str, load_format: str, tokens: int, reps: int, traces: Path,
                  label: str = ""):
    """(rep, tokens, profile, unprofiled wall ms, foreign cores) from one warm CPU engine."""
    from specbench.measure.workloads import builtin as workloads
    from specbench.engine.vllm_engine import Engine, EngineSettings
    from specbench.measure.load import ForeignCpu

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


def _gpu_profiles(path: str, load_format: str, tokens: int, reps: int, traces: Path,
                  label: str = ""):
    """The same tuples from nsys-profiled child processes (the profiled wall is the wall),
    each profile under a report name of its own."""
    for rep in range(reps):
        for n in (1, tokens):
            prof = profile_gpu_decode(path, load_format, n, traces,
                                      report_name(label or path, rep, n))
            yield rep, n, prof, prof.wall_ms, 0.0


def _manifest(embedded: str, models: list, tokens: int, reps: int, gpu: bool) -> dict:
    """The run's manifest: the grid, both models with their shapes, and the profiler."""
    import os

    from specbench.engine.hardware import model_shape
    from specbench.measure.contract import contract
    manifest = contract("hostfloor", embedded, "bfloat16")
    manifest.update(
        grid={"tokens": [1, tokens], "reps": reps, "workload": "repeat", "batch": 1,
              "gamma": 0, "method": method(gpu)},
        models=[{"label": label, "path": path,
                 "weights": "pretrained" if fmt == "auto" else
                            "random (vLLM load_format=dummy): timing only, never acceptance",
                 "shape": model_shape(path, "bfloat16")} for label, path, fmt in models],
        compute_families=None if gpu else COMPUTE_FAMILIES,
        profiler=({"tool": "nsys", "command": nsys_command("REPORT", ["CHILD"]),
                   "stats": nsys_stats_command("REPORT.nsys-rep", "PREFIX"), "env": NSYS_ENV}
                  if gpu else {"tool": "torch.profiler in vLLM's engine-core worker"}),
        load={"loadavg_at_start": os.getloadavg()})
    return manifest


def run_host_floor(tokens: int = 64, reps: int = 3, root=None, progress: bool = True,
                   large_shape: dict | None = None):
    """Profile the embedded model and a random-weight larger one at 1 and ``tokens`` new
    tokens, ``reps`` times each; write a ``hostfloor`` run and return it (left open, so the
    executed notebook can be added before ``run.finish()``)."""
    import os
    import tempfile

    import pandas as pd
    from tqdm import tqdm

    from specbench.engine.assets import cache_dir, embedded_model_dir
    from specbench.engine.hardware import on_gpu
    from specbench.store.runs import DEFAULT_ROOT, create_run

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
    run = create_run(Path(root or DEFAULT_ROOT),
                     _manifest(embedded, models, tokens, reps, gpu))
    steps, families = [], []
    bar = tqdm(total=len(models) * reps, desc="host floor", unit="rep", disable=not progress)
    measure = _gpu_profiles if gpu else _cpu_profiles
    with tempfile.TemporaryDirectory(prefix="specbench-traces-") as traces:
        for label, path, fmt in models:
            for rep, n, prof, unprofiled_ms, foreign_cores in measure(path, fmt, tokens, reps,
                                                                      Path(traces), label):
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


def main(argv=None) -> int:
    """``python -m specbench.measure.hostfloor --child ...``: the profiled child (see
    ``--help``)."""
    return child_main(argv)


if __name__ == "__main__":
    sys.exit(main())
