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
import re
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

__all__ = ["ModelShape", "Sku", "GpuSpec", "MODELS", "SKUS", "GPUS", "gpu_ceilings",
           "sku_from_manifest", "shape_from_manifest", "roofline_status", "operator_times",
           "step_time", "verify_overhead", "measure_cpu_sku"]


@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama-family decoder (dense or mixture-of-experts), enough for a roofline."""
    name: str
    layers: int
    hidden: int
    intermediate: int           # the dense MLP's width, or one expert's width in an MoE
    heads: int
    kv_heads: int
    vocab: int
    weight_bytes: float = 2.0   # bytes per weight element (bf16 = 2)
    act_bytes: float = 2.0      # bytes per activation / KV element
    head_size: int | None = None  # config's explicit head_dim where it is not hidden / heads
    experts: int = 1            # routed experts per MoE layer (1: a dense MLP)
    experts_per_token: int = 1  # experts each token is routed to

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden // self.heads

    def weight_elements(self, layers: int | None = None) -> int:
        """Weight elements of the decoder cut to its first ``layers`` layers (all of them by
        default): each layer's projections (every expert's) and two norms, the final norm, and
        one embedding shared with the output head (tied, as in the embedded model)."""
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = (self.hidden * (q_out + 2 * kv_out) + q_out * self.hidden
                     + 3 * self.hidden * self.intermediate * self.experts + 2 * self.hidden)
        kept = self.layers if layers is None else layers
        return kept * per_layer + self.vocab * self.hidden + self.hidden

    @classmethod
    def from_hf_config(cls, path, name=None, weight_bytes=2.0, act_bytes=2.0) -> "ModelShape":
        """Read a Hugging Face ``config.json`` (a file or the checkpoint folder holding it).

        Multimodal configs keep the decoder in a nested ``text_config``; MoE configs name their
        experts ``num_local_experts`` (Mixtral), ``num_experts`` (Qwen-MoE) or
        ``n_routed_experts``, and an expert's width ``moe_intermediate_size``."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            top = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a readable JSON model config ({exc})") from exc
        cfg = {**top, **top.get("text_config", {})}
        experts = _first(cfg, "num_local_experts", "num_experts", "n_routed_experts") or 1
        try:
            heads = cfg["num_attention_heads"]
            return cls(
                name=name or top.get("_name_or_path") or path.parent.name,
                layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"],
                intermediate=(cfg.get("moe_intermediate_size") if experts > 1 else None)
                or cfg["intermediate_size"],
                heads=heads, kv_heads=cfg.get("num_key_value_heads") or heads,
                vocab=cfg["vocab_size"], weight_bytes=weight_bytes, act_bytes=act_bytes,
                head_size=cfg.get("head_dim"), experts=int(experts),
                experts_per_token=int(_first(cfg, "num_experts_per_tok",
                                             "num_experts_per_token", "moe_topk") or 1)
                if experts > 1 else 1)
        except KeyError as exc:
            raise ValueError(f"{path}: missing field {exc.args[0]!r} in model config") from exc


def _first(cfg: dict, *keys):
    return next((cfg[k] for k in keys if cfg.get(k)), None)


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


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's datasheet ceilings: memory bandwidth and dense (no 2:4 sparsity) peaks per dtype."""
    label: str
    bandwidth: float                 # bytes/s
    peak: dict                       # dtype -> FLOP/s, dense
    source: str

    def sku(self, dtype: str) -> Sku:
        return Sku(self.label, self.peak[dtype], self.bandwidth, self.source)


_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (dense = half the sparsity figure)"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (dense = half the sparsity figure)"
_GH200_DS = "NVIDIA GH200 Grace Hopper Superchip datasheet (Hopper GPU as H100 SXM)"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (dense BF16/FP16 312 TFLOP/s, FP32 19.5)"
_L40S_DS = "NVIDIA L40S datasheet (dense = half the sparsity figure)"


def _peaks(half: float, fp32: float) -> dict:
    return {"bfloat16": half, "float16": half, "float32": fp32}


# Keyed by the exact name `nvidia-smi --query-gpu=name` (and NVML) reports: no substring
# matching, so "GH200" never reads as "H200" and the PCIe/NVL variants keep their own values.
GPUS: dict[str, GpuSpec] = {
    # SXM5 80 GB: 3.35 TB/s HBM3; BF16/FP16 989 TFLOP/s dense (1,979 with sparsity); FP32 67.
    "NVIDIA H100 80GB HBM3": GpuSpec("H100 SXM", 3.35e12, _peaks(989e12, 67e12), _H100_DS),
    # PCIe 80 GB: 2.0 TB/s HBM2e; 756 TFLOP/s dense (1,513 sparse); FP32 51.
    "NVIDIA H100 PCIe": GpuSpec("H100 PCIe", 2.0e12, _peaks(756e12, 51e12), _H100_DS),
    # NVL 94 GB: 3.9 TB/s HBM3; 835 TFLOP/s dense (1,671 sparse); FP32 60.
    "NVIDIA H100 NVL": GpuSpec("H100 NVL", 3.9e12, _peaks(835e12, 60e12), _H100_DS),
    # H200 SXM 141 GB: 4.8 TB/s HBM3e; same compute as H100 SXM.
    "NVIDIA H200": GpuSpec("H200", 4.8e12, _peaks(989e12, 67e12), _H200_DS),
    # H200 NVL 141 GB: 4.8 TB/s; 835 TFLOP/s dense (1,671 sparse); FP32 60.
    "NVIDIA H200 NVL": GpuSpec("H200 NVL", 4.8e12, _peaks(835e12, 60e12), _H200_DS),
    # GH200 with 96 GB HBM3 (nvidia-smi says 480GB: the superchip's LPDDR5X + HBM): 4.0 TB/s.
    "NVIDIA GH200 480GB": GpuSpec("GH200 96GB HBM3", 4.0e12, _peaks(989e12, 67e12), _GH200_DS),
    # GH200 with 144 GB HBM3e: 4.9 TB/s (name as in NVIDIA's mig-parted device list).
    "NVIDIA GH200 144G HBM3e": GpuSpec("GH200 144GB HBM3e", 4.9e12, _peaks(989e12, 67e12),
                                       _GH200_DS),
    "NVIDIA A100-SXM4-40GB": GpuSpec("A100 SXM 40GB", 1.555e12, _peaks(312e12, 19.5e12), _A100_DS),
    "NVIDIA A100-SXM4-80GB": GpuSpec("A100 SXM 80GB", 2.039e12, _peaks(312e12, 19.5e12), _A100_DS),
    "NVIDIA A100-PCIE-40GB": GpuSpec("A100 PCIe 40GB", 1.555e12, _peaks(312e12, 19.5e12), _A100_DS),
    "NVIDIA A100 80GB PCIe": GpuSpec("A100 PCIe 80GB", 1.935e12, _peaks(312e12, 19.5e12), _A100_DS),
    # L40S 48 GB GDDR6: 864 GB/s; BF16/FP16 362 TFLOP/s dense (733 sparse); FP32 91.6.
    "NVIDIA L40S": GpuSpec("L40S", 0.864e12, _peaks(362.05e12, 91.6e12), _L40S_DS),
}

# The two GPUs of the paper's regime, by their short names (the predictor's tests and chapters).
SKUS = {
    "h100-sxm": GPUS["NVIDIA H100 80GB HBM3"].sku("bfloat16"),
    "h200": GPUS["NVIDIA H200"].sku("bfloat16"),
}

_MIG = re.compile(r"^(?P<parent>.+?) MIG (?P<profile>\d+g\.\d+gb\S*)$")


def gpu_ceilings(name: str, dtype: str = "bfloat16") -> dict:
    """The roofline ceilings for a GPU named exactly as nvidia-smi names it, as a manifest entry.

    A known GPU gives its datasheet :class:`Sku` (``status: "datasheet"``); a MIG slice, a GPU
    missing from :data:`GPUS`, or a dtype without a datasheet peak gives ``status: "unknown"``
    with the reason — no roofline, never a silent d = 0."""
    mig = _MIG.match(name)
    if mig:
        return _unknown(name, dtype, f"MIG slice {mig['profile']} of {mig['parent']}: a fraction "
                        "of the datasheet's bandwidth and compute, with no datasheet of its own")
    spec = GPUS.get(name)
    if spec is None:
        return _unknown(name, dtype, f"no datasheet entry for the exact GPU name {name!r} "
                        "(specbench.theory.roofline.GPUS)")
    if dtype not in spec.peak:
        return _unknown(name, dtype, f"no datasheet peak for dtype {dtype!r} on {spec.label}")
    return {**asdict(spec.sku(dtype)), "status": "datasheet", "gpu_name": name, "dtype": dtype}


def _unknown(name: str, dtype: str, reason: str) -> dict:
    return {"status": "unknown", "gpu_name": name, "dtype": dtype, "reason": reason}


def sku_from_manifest(entry: dict | None) -> Sku | None:
    """The :class:`Sku` a manifest's ``roofline_sku`` records, or None when it has none."""
    if not entry or entry.get("status") == "unknown":
        return None
    return Sku(**{f.name: entry[f.name] for f in fields(Sku) if f.name in entry})


def shape_from_manifest(entry: dict | None) -> ModelShape | None:
    """The :class:`ModelShape` a manifest's ``model_shape`` records, or None when it has none."""
    if not entry or entry.get("status") == "unknown":
        return None
    return ModelShape(**{f.name: entry[f.name] for f in fields(ModelShape) if f.name in entry})


def roofline_status(shape_entry: dict | None, sku_entry: dict | None) -> str:
    """One line for the book and the manifest: which roofline a run's d(γ) comes from, or why
    it has none."""
    if sku_from_manifest(sku_entry) is None:
        reason = (sku_entry or {}).get("reason", "no hardware ceilings recorded")
        return f"no roofline: {reason}"
    if shape_from_manifest(shape_entry) is None:
        reason = (shape_entry or {}).get("reason", "no local config.json (hub id)")
        return f"no roofline: model shape unknown ({reason})"
    return f"roofline: {sku_entry.get('name')} ({sku_entry.get('source')})"


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

    def mlp(d_in, d_out):
        """A dense MLP projection, or an MoE layer's experts: each row runs k experts, and the
        step streams the weights of every expert some row was routed to — at most n·k of
        them (the bound: routes spread over distinct experts), never more than there are."""
        if m.experts <= 1:
            return linear(d_in, d_out)
        k, touched = m.experts_per_token, min(m.experts, n * m.experts_per_token)
        return _roof(2 * d_in * d_out * n * k,
                     touched * d_in * d_out * w + (d_in + d_out) * n * k * a, sku)

    per_layer = {
        "qkv_proj": linear(m.hidden, q_out + 2 * kv_out),
        "o_proj": linear(q_out, m.hidden),
        "gate_up_proj": mlp(m.hidden, 2 * m.intermediate),
        "down_proj": mlp(m.intermediate, m.hidden),
        # QKᵀ and PV: every query row meets every cached key; the cache is read once per
        # sequence whatever the number of verified rows.
        "attention": _roof(
            4 * n * m.heads * hd * context,
            batch * 2 * context * kv_out * a + 2 * n * q_out * a + n * m.heads * context * a,
            sku),
        "norm_act": _roof(10 * n * m.hidden + 3 * n * m.intermediate,
                          (4 * m.hidden + 3 * m.intermediate) * n * a, sku),
    }
    if m.experts > 1:
        per_layer["router"] = linear(m.hidden, m.experts)
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
