"""A frozen roofline predictor for the verify overhead d(γ) of one decode step.

Every operator of a decode step takes ``max(FLOPs / peak, bytes / bandwidth)`` (the LLM-Viewer
roofline); the step is their sum. Verifying γ+1 positions instead of one multiplies the rows of
every operator by γ+1, but in the memory-bound decode regime each projection streams its whole
weight matrix whatever the row count, and the KV cache read does not grow with the number of
verified rows — so

    d(γ) = T(batch·(γ+1) rows) / T(batch rows) − 1

is small. "Frozen" means nothing here is fitted to timed speculative cells: model shapes and
hardware specs are data (public configs and datasheets, or a CPU microbenchmark).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

__all__ = ["ModelShape", "Sku", "MODELS", "SKUS", "operator_times", "step_time",
           "verify_overhead", "measure_cpu_sku"]


@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama-family decoder, enough for a roofline."""
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    weight_bytes: float = 2.0   # bytes per weight element (bf16 = 2)
    act_bytes: float = 2.0      # bytes per activation / KV element

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_hf_config(cls, path, name=None, weight_bytes=2.0, act_bytes=2.0) -> "ModelShape":
        """Read a Hugging Face ``config.json`` (a file or the checkpoint folder holding it)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        cfg = json.loads(path.read_text())
        try:
            return cls(
                name=name or cfg.get("_name_or_path") or path.parent.name,
                layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"],
                intermediate=cfg["intermediate_size"], heads=cfg["num_attention_heads"],
                kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
                vocab=cfg["vocab_size"], weight_bytes=weight_bytes, act_bytes=act_bytes)
        except KeyError as exc:
            raise ValueError(f"{path}: missing field {exc.args[0]!r} in model config") from exc


@dataclass(frozen=True)
class Sku:
    """A piece of hardware as the roofline sees it."""
    name: str
    peak_flops: float        # FLOP/s at the step's dtype
    bandwidth: float         # bytes/s from main memory
    source: str = ""


# Shapes from each model's published config.json on the Hugging Face hub.
MODELS = {
    # meta-llama/Llama-3.1-8B-Instruct config.json
    "llama-3.1-8b": ModelShape("Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128256),
    # meta-llama/Llama-3.2-1B-Instruct config.json
    "llama-3.2-1b": ModelShape("Llama-3.2-1B", 16, 2048, 8192, 32, 8, 128256),
    # HuggingFaceTB/SmolLM2-135M-Instruct config.json
    "smollm2-135m": ModelShape("SmolLM2-135M", 30, 576, 1536, 9, 3, 49152),
}

SKUS = {
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: 3.35 TB/s HBM3, 989 TFLOP/s dense BF16
    # (the datasheet's 1,979 TFLOP/s is with 2:4 sparsity).
    "h100-sxm": Sku("H100 SXM", 989e12, 3.35e12, "NVIDIA H100 datasheet"),
    # NVIDIA H200 datasheet: 4.8 TB/s HBM3e, same Hopper compute as H100 SXM.
    "h200": Sku("H200", 989e12, 4.8e12, "NVIDIA H200 datasheet"),
}


def _roof(flops: float, bytes_: float, sku: Sku) -> float:
    return max(flops / sku.peak_flops, bytes_ / sku.bandwidth)


def operator_times(model: ModelShape, sku: Sku, rows_per_seq: int, batch: int = 1,
                   context: int = 1024) -> dict[str, float]:
    """Seconds per operator family for one decode step over ``batch`` sequences, each
    computing ``rows_per_seq`` positions against ``context`` cached tokens."""
    m, n = model, rows_per_seq * batch
    w, a, hd = m.weight_bytes, m.act_bytes, m.head_dim
    q_out, kv_out = m.heads * hd, m.kv_heads * hd

    def linear(d_in, d_out):
        return _roof(2 * d_in * d_out * n, d_in * d_out * w + (d_in + d_out) * n * a, sku)

    per_layer = {
        "qkv_proj": linear(m.hidden, q_out + 2 * kv_out),
        "o_proj": linear(q_out, m.hidden),
        "gate_up_proj": linear(m.hidden, 2 * m.intermediate),
        "down_proj": linear(m.intermediate, m.hidden),
        # QKᵀ and PV: every query row meets every cached key; the cache is read once per
        # sequence whatever the number of verified rows.
        "attention": _roof(
            4 * n * m.heads * hd * context,
            batch * 2 * context * kv_out * a + 2 * n * q_out * a + n * m.heads * context * a,
            sku),
        "norm_act": _roof(10 * n * m.hidden + 3 * n * m.intermediate,
                          (4 * m.hidden + 3 * m.intermediate) * n * a, sku),
    }
    times = {k: v * m.layers for k, v in per_layer.items()}
    times["lm_head"] = linear(m.hidden, m.vocab)
    return times


def step_time(model: ModelShape, sku: Sku, rows_per_seq: int, batch: int = 1,
              context: int = 1024) -> float:
    """Seconds for one decode step, the sum of its operators' roofline times."""
    return sum(operator_times(model, sku, rows_per_seq, batch, context).values())


def verify_overhead(model: ModelShape, sku: Sku, gamma, batch: int = 1, context: int = 1024):
    """d(γ) = T(γ+1 rows per sequence) / T(1 row per sequence) − 1. Broadcasts over γ."""
    gammas = np.atleast_1d(np.asarray(gamma))
    if (gammas < 0).any() or not np.all(gammas == np.floor(gammas)):
        raise ValueError(f"gamma must be whole numbers >= 0, got {gamma!r}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch!r}")
    base = step_time(model, sku, 1, batch, context)
    d = np.array([step_time(model, sku, int(g) + 1, batch, context) / base - 1 for g in gammas])
    return float(d[0]) if np.ndim(gamma) == 0 else d


def measure_cpu_sku(name: str | None = None, threads: int | None = None, gemm_n: int = 2048,
                    copy_mib: int = 512, repeats: int = 5, dtype: str = "float32") -> Sku:
    """Measure a CPU's roofline ceilings with two microbenchmarks and return a :class:`Sku`.

    * peak: the best of ``repeats`` GEMMs of ``gemm_n``³ (2n³ FLOPs each) at the engine's
      dtype — numpy for float32; torch for bfloat16/float16, which dispatches to the same
      oneDNN kernels as vLLM's CPU linear layers (numpy has no bf16, and a float32 peak
      understates a bf16-capable core) — in the threads the process allows (set
      ``OMP_NUM_THREADS`` before import to pin them);
    * bandwidth: the best of ``repeats`` copies of a ``copy_mib`` MiB array (read + write bytes).
    """
    if dtype == "float32":
        rng = np.random.default_rng(0)
        a = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
        b = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
        matmul, library = (lambda: a @ b), "numpy"
    else:
        import torch
        if threads:
            torch.set_num_threads(threads)
        ta = torch.randn(gemm_n, gemm_n, dtype=getattr(torch, dtype))
        tb = torch.randn(gemm_n, gemm_n, dtype=getattr(torch, dtype))
        matmul, library = (lambda: torch.mm(ta, tb)), "torch"
    matmul()  # warm the BLAS threads and caches
    gemm = min(_timed(matmul) for _ in range(repeats))
    src = np.ones(copy_mib * 2**20 // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    copy = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    threads = threads or len(os.sched_getaffinity(0))
    return Sku(name or f"cpu-{threads}t-{dtype}", 2 * gemm_n**3 / gemm, 2 * src.nbytes / copy,
               f"measure_cpu_sku(gemm_n={gemm_n}, copy_mib={copy_mib}), {dtype} {library} GEMM")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def with_dtype_bytes(model: ModelShape, weight_bytes: float, act_bytes: float) -> ModelShape:
    """The same shape at another precision (e.g. fp32 = 4 bytes)."""
    return replace(model, weight_bytes=weight_bytes, act_bytes=act_bytes)
