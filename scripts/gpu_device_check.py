#!/usr/bin/env python3
"""One prepared check for an NVIDIA machine without vLLM or network (Python 3.11/3.12, PyTorch,
transformers, CUDA; no nsys). Minutes, not hours: each section stops at --budget-s.

(a) **probe** — specbench's GPU probe (NVML / nvidia-smi, no ``torch.cuda``) against the real
    driver; then torch's own device names, to check they agree and that the probe left CUDA
    uninitialised; the datasheet ceilings the roofline would use for that exact name.
(b) **GEMMs** — bf16 ``F.linear`` at the verify shapes of every model in
    :data:`specbench.theory.roofline.MODELS`: rows N·(γ+1) for N ∈ {1, 4}, γ ∈ {0, 2, 4, 6}, each
    weight cycled through enough copies to defeat the L2 cache; time per call against the
    roofline's max(FLOPs/peak, bytes/bandwidth) → efficiency, and d(γ) of the linear layers
    measured vs. predicted. Also one large GEMM and one large copy: the achieved ceilings.
(c) **decode host floor** — a random-weight Llama of the embedded SmolLM2-135M shape (and the
    SmolLM2-1.7B shape) through transformers: a greedy decode of 1 and of N tokens, timed by
    the wall clock and CUDA events, and profiled by torch.profiler (GPU kernel time); the
    difference over N−1 steps splits a step into kernel time and host-exposed time.

Everything goes to one folder laid out as a run of its own kind (``kind: gpucheck``; engine
``transformers`` — this is not vLLM): manifest.json and at most seven tables, flat, so the
device tool returns them all. ``--adopt DIR --store runs`` files such a folder into the run
store as runs/<sku>/<run-id>/. ``--device cpu --tiny`` exercises every code path here in
seconds (unit-tested); its numbers mean nothing.

    python scripts/gpu_device_check.py --out $OUT            # on the GPU machine
    python scripts/gpu_device_check.py --adopt FETCHED_DIR --store runs
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "lib"))

# Imported once lib/ is on the path; neither module touches torch.cuda.
from specbench.engine import hardware  # noqa: E402
from specbench.theory import roofline  # noqa: E402

VERIFY_BATCHES = (1, 4)
VERIFY_GAMMAS = (0, 2, 4, 6)
L2_DEFEAT_BYTES = 512 * 2**20      # cycle weights through more than any L2 (H200: 50 MB)
TINY_SHAPE = roofline.ModelShape("tiny", 2, 64, 128, 4, 2, 256)
# The published SmolLM2-1.7B shape (as specbench.measure.hostfloor.LARGE_SHAPE), random weights.
LARGE = roofline.ModelShape("SmolLM2-1.7B", 24, 2048, 8192, 32, 32, 49152)
TABLES = ("probe.json", "ceilings.json", "gemm.csv", "gemm_d.csv", "decode_steps.csv",
          "decode.csv")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", type=Path, help="folder for the run's files (flat)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cuda (default); cpu only to exercise the code path")
    p.add_argument("--tiny", action="store_true", help="tiny shapes and few repetitions")
    p.add_argument("--ceilings-of", metavar="NVIDIA_SMI_NAME",
                   help="compare against this GPU's datasheet (default: the probed GPU)")
    p.add_argument("--tokens", type=int, default=64, help="N of the 1-vs-N decode (64)")
    p.add_argument("--reps", type=int, default=3, help="repetitions of each timing (3)")
    p.add_argument("--prompt-tokens", type=int, default=512, help="prompt length (512)")
    p.add_argument("--budget-s", type=float, default=240.0,
                   help="stop starting new work after this many seconds (240)")
    p.add_argument("--adopt", type=Path, metavar="DIR",
                   help="file a finished check's folder into --store as <sku>/<run-id>/")
    p.add_argument("--store", type=Path, default=REPO / "runs", help="run store (runs/)")
    args = p.parse_args(argv)
    if not args.adopt and not args.out:
        p.error("--out is required (or --adopt DIR)")
    if args.tokens < 2 or args.reps < 1 or args.prompt_tokens < 1:
        p.error(f"--tokens must be >= 2, --reps and --prompt-tokens >= 1; got {args.tokens}, "
                f"{args.reps}, {args.prompt_tokens}")
    return args


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.skipped: list[str] = []

    def left(self, what: str) -> bool:
        if time.monotonic() < self.deadline:
            return True
        self.skipped.append(what)
        return False


# -- (a) probe ---------------------------------------------------------------------------------

def probe(device: str) -> dict:
    """The probe first (before torch's CUDA is touched), then torch's view of the same GPUs."""
    names = hardware.gpu_names()
    result = {"probe_on_gpu": bool(names), "probe_names": names,
              "probe_gpus": hardware.gpu_list()}
    import torch
    result["torch"] = torch.__version__
    result["torch_cuda_build"] = torch.version.cuda
    if device == "cuda":
        result["cuda_initialised_after_probe"] = bool(torch.cuda.is_initialized())
        count = torch.cuda.device_count()
        result["torch_names"] = [torch.cuda.get_device_name(i) for i in range(count)]
        props = torch.cuda.get_device_properties(0)
        result["torch_device0"] = {"total_memory_gib": round(props.total_memory / 2**30, 1),
                                   "sm_count": props.multi_processor_count,
                                   "capability": f"{props.major}.{props.minor}"}
        result["names_agree"] = result["torch_names"][:1] == [n for n in names
                                                              if " MIG " not in n][:1]
    return result


def ceilings(args, probed: dict) -> tuple[dict, roofline.Sku | None]:
    """The datasheet entry the roofline would use, by exact name, and its Sku (or None)."""
    name = args.ceilings_of or next(iter(probed.get("probe_names") or []), "")
    entry = roofline.gpu_ceilings(name, "bfloat16") if name else {
        "status": "unknown", "gpu_name": None, "dtype": "bfloat16",
        "reason": "no GPU reported by the probe"}
    return entry, roofline.sku_from_manifest(entry)


# -- (b) GEMMs at the verify shapes ------------------------------------------------------------

def linear_layers(shape: roofline.ModelShape) -> list[tuple[str, int, int, int]]:
    """(name, d_in, d_out, times per step) of a decoder's linear layers."""
    hd = shape.head_dim
    q, kv = shape.heads * hd, shape.kv_heads * hd
    n = shape.layers
    return [("qkv_proj", shape.hidden, q + 2 * kv, n), ("o_proj", q, shape.hidden, n),
            ("gate_up_proj", shape.hidden, 2 * shape.intermediate, n),
            ("down_proj", shape.intermediate, shape.hidden, n),
            ("lm_head", shape.hidden, shape.vocab, 1)]


def verify_rows() -> list[tuple[int, int, int]]:
    """(batch N, γ, rows N·(γ+1)) of every verify step of the sweep's grid."""
    return [(b, g, b * (g + 1)) for b in VERIFY_BATCHES for g in VERIFY_GAMMAS]


def roofline_s(d_in: int, d_out: int, rows: int, sku: roofline.Sku, w: float = 2,
               a: float = 2) -> float:
    return max(2 * d_in * d_out * rows / sku.peak_flops,
               (d_in * d_out * w + (d_in + d_out) * rows * a) / sku.bandwidth)


def _sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(torch, device: str, fn, iters: int, reps: int) -> float:
    """Median seconds per call of ``fn(i)`` over ``reps`` loops of ``iters`` calls (CUDA
    events on a GPU, the wall clock on a CPU)."""
    fn(0)
    _sync(torch, device)
    samples = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(iters):
                fn(i)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for i in range(iters):
                fn(i)
            samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def gemm_section(torch, args, sku, budget: Budget) -> tuple[list[dict], list[dict]]:
    import torch.nn.functional as F

    dtype = torch.bfloat16
    shapes = [TINY_SHAPE] if args.tiny else list(roofline.MODELS.values())
    rows_out, d_rows = [], []
    for shape in shapes:
        per_rows: dict[int, float] = {}
        per_rows_roof: dict[int, float] = {}
        for name, d_in, d_o, count in linear_layers(shape):
            if not budget.left(f"gemm {shape.name} {name}"):
                break
            size = d_in * d_o * 2
            copies = 1 if args.tiny else max(1, min(64, -(-L2_DEFEAT_BYTES // size)))
            weights = [torch.randn(d_o, d_in, device=args.device, dtype=dtype)
                       for _ in range(copies)]
            for rows in sorted({r for _, _, r in verify_rows()}):
                x = torch.randn(rows, d_in, device=args.device, dtype=dtype)
                # Bound now: `del weights` below unbinds the loop's name.
                sec = timed(torch, args.device,
                            lambda i, x=x, w=weights, n=copies: F.linear(x, w[i % n]),
                            iters=max(copies, 2 if args.tiny else 20), reps=args.reps)
                roof = roofline_s(d_in, d_o, rows, sku) if sku else float("nan")
                rows_out.append({"model": shape.name, "op": name, "d_in": d_in, "d_out": d_o,
                                 "rows": rows, "measured_us": 1e6 * sec,
                                 "roofline_us": 1e6 * roof,
                                 "efficiency": roof / sec if sku else float("nan"),
                                 "weight_copies": copies})
                per_rows[rows] = per_rows.get(rows, 0.0) + count * sec
                per_rows_roof[rows] = per_rows_roof.get(rows, 0.0) + count * roof
            del weights
        for batch, gamma, rows in verify_rows():
            if rows not in per_rows or batch not in per_rows:
                continue
            d_full = (roofline.verify_overhead(shape, sku, gamma, batch) if sku
                      else float("nan"))
            d_rows.append({"model": shape.name, "batch": batch, "gamma": gamma, "rows": rows,
                          "d_linear_measured": per_rows[rows] / per_rows[batch] - 1,
                          "d_linear_roofline": (per_rows_roof[rows] / per_rows_roof[batch] - 1
                                                if sku else float("nan")),
                          "d_roofline_full_step": d_full})
    return rows_out, d_rows


def achieved_ceilings(torch, args) -> dict:
    """One large bf16 GEMM and one large device copy: what this GPU reaches."""
    n = 256 if args.tiny else 8192
    a = torch.randn(n, n, device=args.device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=args.device, dtype=torch.bfloat16)
    gemm = timed(torch, args.device, lambda i: torch.mm(a, b), iters=3 if args.tiny else 20,
                 reps=args.reps)
    nbytes = (8 if args.tiny else 2048) * 2**20
    src = torch.empty(nbytes, dtype=torch.uint8, device=args.device)
    dst = torch.empty_like(src)
    copy = timed(torch, args.device, lambda i: dst.copy_(src), iters=3 if args.tiny else 20,
                 reps=args.reps)
    return {"gemm_n": n, "achieved_bf16_flops": 2 * n**3 / gemm, "copy_bytes": nbytes,
            "achieved_bandwidth": 2 * nbytes / copy}


# -- (c) decode host floor through transformers ------------------------------------------------

def build_model(torch, transformers, shape: roofline.ModelShape, device: str):
    config = transformers.LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
        max_position_embeddings=8192, tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config)
    return model.to(dtype=torch.bfloat16).eval()


def decode(torch, model, prompt, tokens: int, device: str) -> None:
    """Greedy: prefill gives token 1, then tokens−1 decode steps; each step's token reaches
    the host before the next is scheduled, as in a serving engine."""
    with torch.inference_mode():
        out = model(input_ids=prompt, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(tokens - 1):
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            tok.cpu()
    _sync(torch, device)


def compute_ms(prof, device: str) -> tuple[float, float]:
    """Compute time in a profile, two ways that must agree on a GPU: the summed durations of
    the device-side events (kernels, memcpy, memset) and the summed self device time of the
    averaged rows. On a CPU (dry run): compute-family operators' self time, twice."""
    if device == "cuda":
        from torch.autograd import DeviceType
        events = sum(e.time_range.elapsed_us() for e in prof.events()
                     if e.device_type == DeviceType.CUDA)
        rows = sum(getattr(r, "self_device_time_total", 0.0) or
                   getattr(r, "self_cuda_time_total", 0.0) for r in prof.key_averages())
        return events / 1e3, rows / 1e3
    from specbench.measure.profiler import HOST_FAMILY, classify
    total = sum(r.self_cpu_time_total for r in prof.key_averages()
                if classify(r.key) != HOST_FAMILY)
    return total / 1e3, total / 1e3


def decode_section(torch, transformers, args, budget: Budget) -> tuple[list[dict], list[dict]]:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda"
                                           else [])
    shapes = [TINY_SHAPE] if args.tiny else [roofline.MODELS["smollm2-135m"], LARGE]
    steps = []
    for shape in shapes:
        if not budget.left(f"decode {shape.name}"):
            continue
        model = build_model(torch, transformers, shape, args.device)
        gen = torch.Generator(device="cpu").manual_seed(0)
        prompt = torch.randint(0, shape.vocab, (1, args.prompt_tokens), generator=gen)
        prompt = prompt.to(args.device)
        decode(torch, model, prompt, 4, args.device)                      # warm every path
        for rep in range(args.reps):
            for n in (1, args.tokens):
                if not budget.left(f"decode {shape.name} rep {rep} tokens {n}"):
                    break
                if args.device == "cuda":
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record()
                t0 = time.perf_counter()
                decode(torch, model, prompt, n, args.device)
                wall = time.perf_counter() - t0
                if args.device == "cuda":
                    end.record()
                    end.synchronize()
                event_ms = start.elapsed_time(end) if args.device == "cuda" else float("nan")
                with profile(activities=activities) as prof:
                    t0 = time.perf_counter()
                    decode(torch, model, prompt, n, args.device)
                    profiled = time.perf_counter() - t0
                compute, compute_rows = compute_ms(prof, args.device)
                steps.append({"model": f"{shape.name} shape (random weights)", "tokens": n,
                              "rep": rep, "unprofiled_wall_ms": 1e3 * wall,
                              "event_ms": event_ms, "wall_ms": 1e3 * profiled,
                              "compute_ms": compute, "compute_ms_key_averages": compute_rows})
        del model
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return steps, per_step(steps)


def per_step(steps: list[dict]) -> list[dict]:
    """Median over repetitions of the 1-vs-N difference per step (as specbench.derive.decompose)."""
    out = []
    for model in sorted({s["model"] for s in steps}):
        diffs = []
        for rep in sorted({s["rep"] for s in steps if s["model"] == model}):
            pair = {s["tokens"]: s for s in steps if s["model"] == model and s["rep"] == rep}
            if len(pair) != 2:
                continue
            short, long = pair[min(pair)], pair[max(pair)]
            k = long["tokens"] - short["tokens"]
            diffs.append({key: (long[key] - short[key]) / k for key in
                          ("wall_ms", "compute_ms", "compute_ms_key_averages",
                           "unprofiled_wall_ms", "event_ms")})
        if not diffs:
            continue
        med = {key: statistics.median(d[key] for d in diffs) for key in diffs[0]}
        med["host_ms"] = med["wall_ms"] - med["compute_ms"]
        med["host_share"] = med["host_ms"] / med["wall_ms"] if med["wall_ms"] else float("nan")
        out.append({"model": model, "reps": len(diffs), **med})
    return out


# -- the run folder ----------------------------------------------------------------------------

def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def code_revision() -> dict:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.strip()
        return {"revision": rev}
    except (OSError, subprocess.CalledProcessError):
        return {"revision": os.environ.get("SPECBENCH_CODE_REVISION", "unknown")}


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        if not rows:
            return
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def manifest(args, probed, entry, started, torch, transformers, budget) -> dict:
    hw = hardware.hardware_info()
    threads = None if hw["gpus"] else torch.get_num_threads()
    sku = hardware.sku_id(hw, "bfloat16", threads)
    stamp = started.replace(":", "").replace("-", "").replace("+0000", "Z")[:15]
    model = roofline.MODELS["smollm2-135m"] if not args.tiny else TINY_SHAPE
    return {
        "schema_version": 1, "run_id": f"gpucheck-{stamp}-{os.urandom(3).hex()}",
        "kind": "gpucheck", "sku": sku, "status": "complete", "started_at": started,
        "finished_at": _now(), "code": code_revision(),
        "model": {"name": f"{model.name} shape (random weights)",
                  "weights_sha256": "random (torch.manual_seed(0)), never saved",
                  "tokenizer_sha256": "none (random prompt token ids)"},
        "engine": {"name": "transformers", "version": transformers.__version__,
                   "settings": {"device": args.device, "dtype": "bfloat16",
                                "attention": "transformers default (sdpa)",
                                "decode": "greedy, KV cache, token to host every step",
                                "tiny": args.tiny},
                   "torch": torch.__version__, "cuda_build": torch.version.cuda,
                   "note": "not vLLM: a device check with PyTorch and transformers only"},
        "hardware": {**hw, "threads": threads, "torch_view": {
            k: probed.get(k) for k in ("torch_names", "torch_device0")}},
        "dtype": "bfloat16", "roofline_sku": entry,
        "roofline": roofline.roofline_status(
            {"name": model.name, "layers": model.layers, "hidden": model.hidden,
             "intermediate": model.intermediate, "heads": model.heads,
             "kv_heads": model.kv_heads, "vocab": model.vocab}, entry),
        "grid": {"verify_batches": list(VERIFY_BATCHES), "verify_gammas": list(VERIFY_GAMMAS),
                 "gemm_models": [TINY_SHAPE.name] if args.tiny else list(roofline.MODELS),
                 "decode_tokens": [1, args.tokens], "reps": args.reps,
                 "prompt_tokens": args.prompt_tokens,
                 "method": "GEMMs: F.linear bf16, CUDA events, weights cycled past L2; decode: "
                           "difference of 1 and N tokens, compute = GPU kernel self time in "
                           "torch.profiler, wall = clock around the profiled call"},
        "sections_skipped_for_budget": budget.skipped,
        "tables": list(TABLES),
        "python": platform.python_version(),
    }


def run_check(args) -> Path:
    started = _now()
    budget = Budget(args.budget_s)
    probed = probe(args.device)          # before anything else imports torch's CUDA
    import torch
    import transformers
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_device_check.py: --device cuda but torch sees no CUDA device "
                         f"(probe said: {probed['probe_names'] or 'no GPU'})")
    entry, sku = ceilings(args, probed)
    measured = achieved_ceilings(torch, args) if budget.left("achieved ceilings") else {}
    ceiling_record = {"datasheet": entry, "achieved": measured}
    if sku and measured:
        ceiling_record["achieved_fraction"] = {
            "bf16_flops": measured["achieved_bf16_flops"] / sku.peak_flops,
            "bandwidth": measured["achieved_bandwidth"] / sku.bandwidth}
    gemm, gemm_d = gemm_section(torch, args, sku, budget)
    steps, decomposed = decode_section(torch, transformers, args, budget)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps(probed, indent=2))
    (out / "ceilings.json").write_text(json.dumps(ceiling_record, indent=2))
    write_csv(out / "gemm.csv", gemm)
    write_csv(out / "gemm_d.csv", gemm_d)
    write_csv(out / "decode_steps.csv", steps)
    write_csv(out / "decode.csv", decomposed)
    m = manifest(args, probed, entry, started, torch, transformers, budget)
    (out / "manifest.json").write_text(json.dumps(m, indent=2))
    return out


def adopt(folder: Path, store: Path) -> Path:
    """Copy a finished check's folder into the run store as <sku>/<run-id>/ (read-only)."""
    m = json.loads((folder / "manifest.json").read_text())
    if m.get("kind") != "gpucheck" or m.get("status") != "complete":
        raise SystemExit(f"{folder / 'manifest.json'}: field kind/status: not a complete "
                         "gpucheck run")
    target = store / m["sku"] / m["run_id"]
    if target.exists():
        raise SystemExit(f"{target}: already in the store (runs are immutable)")
    target.mkdir(parents=True)
    for name in ("manifest.json", *TABLES):
        if (folder / name).exists():
            shutil.copy(folder / name, target / name)
            (target / name).chmod(0o444)
    return target


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.adopt:
        print(adopt(args.adopt, args.store))
        return 0
    print(run_check(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
