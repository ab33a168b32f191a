"""The verify cost d(γ, N) from microbenchmarks of the engine's own kernels.

The source paper's d came from a roofline "whose efficiencies come from standalone
microbenchmarks". Here the microbenchmark times the very kernels vLLM's CPU backend runs — each
linear layer is dispatched through ``vllm.model_executor.layers.utils.
dispatch_cpu_unquantized_gemm`` (oneDNN, sgl-kernel or zentorch, whichever vLLM picks on this
CPU) — at the model's real layer shapes, the run's dtype and one thread pinned to core 0 (as
vLLM pins its one OpenMP thread), for every row count a step carries: N rows for the baseline
step of a batch of N, N·(γ+1) rows for a verify step. Attention over the run's context is timed
with torch's ``scaled_dot_product_attention`` at the model's head shapes (an approximation of
vLLM's CPU attention kernel; it is a few percent of the step).

A step's kernel time is ``T(R) = L·(qkv + o + gate_up + down + attention)(R) + lm_head(R)``
(the sampler computes logits for every verified position). The verify overhead is the
predicted step time ratio minus one, with the step's non-kernel time unchanged:

    d(γ, N) = (T(N·(γ+1)) − T(N)) / t_base(N)

where t_base(N) is the measured γ=0 step of the batch (already an input of eq. 1). Nothing
here times a speculative cell: the kernels run alone, at the shapes a verify step would give
them. Weights are random (a GEMM's time does not depend on the values).
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import pandas as pd

from .roofline import ModelShape

__all__ = ["layer_shapes", "time_kernels", "verify_delta_ms", "MicrobenchConfig",
           "run_microbench", "METHOD"]

METHOD = ("d(γ,N) = (T(N(γ+1)) − T(N)) / t_base(N); T(R) = layers·(qkv+o+gate_up+down linear "
          "through vLLM's dispatch_cpu_unquantized_gemm + torch SDPA attention over the "
          "context)(R) + lm_head(R); medians of timed calls, one thread pinned to core 0, "
          "the run's dtype, random weights")


def layer_shapes(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in, out) of every linear of one decoder layer, and of the LM head."""
    head_dim = shape.head_dim
    return {"qkv": (shape.hidden, (shape.heads + 2 * shape.kv_heads) * head_dim),
            "o": (shape.heads * head_dim, shape.hidden),
            "gate_up": (shape.hidden, 2 * shape.intermediate),
            "down": (shape.intermediate, shape.hidden),
            "lm_head": (shape.hidden, shape.vocab)}


def _median_ms(fn, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _linear(in_f: int, out_f: int, dtype):
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layer = torch.nn.Linear(in_f, out_f, bias=False, dtype=dtype)
    layer.weight.requires_grad_(False)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    return layer


def time_kernels(shape: ModelShape, rows: list[int], context: int, dtype: str = "bfloat16",
                 repeats: int = 30, progress=None) -> pd.DataFrame:
    """Median time of each kernel at each row count: one row per (op, rows)."""
    import torch

    torch_dtype = getattr(torch, dtype)
    out = []
    with torch.inference_mode():
        for op, (in_f, out_f) in layer_shapes(shape).items():
            layer = _linear(in_f, out_f, torch_dtype)
            for r in rows:
                x = torch.randn(r, in_f, dtype=torch_dtype)
                ms = _median_ms(lambda: layer.cpu_linear(x, layer.weight, None), repeats)
                out.append({"op": op, "rows": r, "ms": ms, "in": in_f, "out": out_f})
                if progress is not None:
                    progress.update()
            del layer
        k = torch.randn(1, shape.kv_heads, context, shape.head_dim, dtype=torch_dtype)
        k = k.repeat_interleave(shape.heads // shape.kv_heads, dim=1)
        for r in rows:
            # A verify step's R rows attend to the same context (the KV read does not grow).
            q = torch.randn(1, shape.heads, r, shape.head_dim, dtype=torch_dtype)
            ms = _median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, k),
                            repeats)
            out.append({"op": "attention", "rows": r, "ms": ms, "in": context, "out": 0})
            if progress is not None:
                progress.update()
    return pd.DataFrame(out)


def step_kernel_ms(kernels: pd.DataFrame, layers: int) -> pd.Series:
    """T(R) per row count: the layers' kernels times the layer count, plus the LM head."""
    per = kernels.pivot_table(index="rows", columns="op", values="ms")
    layer_ops = [c for c in per.columns if c != "lm_head"]
    return per[layer_ops].sum(axis=1) * layers + per.get("lm_head", 0.0)


def verify_delta_ms(kernels: pd.DataFrame, layers: int, batches, gammas) -> pd.DataFrame:
    """Per (batch, γ): the extra kernel time of a verify step over the baseline step."""
    total = step_kernel_ms(kernels, layers)
    rows = []
    for n in batches:
        for g in gammas:
            r = n * (g + 1)
            rows.append({"batch": n, "gamma": g, "rows": r, "kernel_ms": total[r],
                         "kernel_ms_base": total[n], "delta_ms": total[r] - total[n]})
    return pd.DataFrame(rows)


@dataclass
class MicrobenchConfig:
    model: str | None = None
    dtype: str = "bfloat16"
    batches: tuple[int, ...] = (1, 4)
    gammas: tuple[int, ...] = (0, 2, 4, 6)
    context: int = 900          # prompt tokens + half the output, as in the sweeps
    repeats: int = 30
    root: str | None = None

    def validate(self) -> None:
        if self.dtype not in ("bfloat16", "float32", "float16"):
            raise ValueError(f"dtype must be bfloat16, float16 or float32, got {self.dtype!r}")
        if any(int(b) != b or b < 1 for b in self.batches):
            raise ValueError(f"batches must be whole numbers >= 1, got {self.batches}")
        if any(int(g) != g or g < 0 for g in self.gammas):
            raise ValueError(f"gammas must be whole numbers >= 0, got {self.gammas}")
        if self.context < 1 or self.repeats < 1:
            raise ValueError("context and repeats must be >= 1")


def run_microbench(cfg: MicrobenchConfig, progress: bool = True):
    """Measure the kernels into a run of kind 'microbench' (one thread pinned to core 0)."""
    from tqdm import tqdm

    from .contract import contract
    from .runs import DEFAULT_ROOT, create_run
    import torch

    cfg.validate()
    model = cfg.model
    if not model:
        from .assets import embedded_model_dir
        model = str(embedded_model_dir())
    shape = ModelShape.from_hf_config(model)
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {0})
    rows = sorted({n * (g + 1) for n in cfg.batches for g in cfg.gammas})
    manifest = {**contract("microbench", model, cfg.dtype),
                "grid": {"batches": list(cfg.batches), "gammas": list(cfg.gammas),
                         "rows": rows, "context": cfg.context, "repeats": cfg.repeats},
                "method": METHOD, "torch_threads": torch.get_num_threads(),
                "affinity": sorted(os.sched_getaffinity(0))}
    run = create_run(cfg.root or DEFAULT_ROOT, manifest)
    bar = tqdm(total=(len(layer_shapes(shape)) + 1) * len(rows), desc="microbench",
               unit="kernel", disable=not progress)
    kernels = time_kernels(shape, rows, cfg.context, cfg.dtype, cfg.repeats, bar)
    bar.close()
    run.write_table("kernels.csv", kernels)
    run.write_table("verify.csv", verify_delta_ms(kernels, shape.layers, cfg.batches,
                                                  cfg.gammas))
    run.finish()
    return run
