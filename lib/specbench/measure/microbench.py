"""The verify cost d(γ, N) from microbenchmarks of the engine's own kernels.

The source paper's d came from a roofline "whose efficiencies come from standalone
microbenchmarks". Here the microbenchmark times the very kernels vLLM's CPU backend runs — each
linear layer is dispatched through ``vllm.model_executor.layers.utils.
dispatch_cpu_unquantized_gemm`` (oneDNN, sgl-kernel or zentorch, whichever vLLM picks on this
CPU) — at the model's real layer shapes, the run's dtype and the engine's threads on the engine's
cores (by default one thread pinned to core 0, as vLLM pins its one OpenMP thread), for every
row count a step carries: N rows for the baseline
step of a batch of N, N·(γ+1) rows for a verify step. Attention is timed per sequence, its r
query rows against the run's context, as explicit matrix products with the query heads grouped
over their shared key-value head (the arithmetic of vLLM's CPU attention; torch's fused
``scaled_dot_product_attention`` was tried first and takes a much slower path for a single
query row, which no decode kernel does).

A step of N sequences with r rows each has kernel time
``T(N, r) = L·(qkv + o + gate_up + down)(N·r) + L·N·attention(r) + lm_head(N·r)`` (the sampler
computes logits for every verified position). The verify overhead is the predicted step time
ratio minus one, with the step's non-kernel time unchanged:

    d(γ, N) = (T(N, γ+1) − T(N, 1)) / t_base(N)

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

from specbench.engine.hardware import resolve_dtype
from specbench.theory.roofline import ModelShape

__all__ = ["layer_shapes", "time_kernels", "verify_delta_ms", "MicrobenchConfig",
           "run_microbench", "METHOD"]

METHOD = ("d(γ,N) = (T(N,γ+1) − T(N,1)) / t_base(N); T(N,r) = layers·(qkv+o+gate_up+down "
          "linear through vLLM's dispatch_cpu_unquantized_gemm)(N·r) + layers·N·attention(r "
          "query rows over the context, grouped-query matmuls) + lm_head(N·r); medians of "
          "timed calls, the engine's threads on its cores (manifest: torch_threads, affinity), "
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
                 repeats: int = 30, progress=None, attention_rows: list[int] | None = None
                 ) -> pd.DataFrame:
    """Median time of each kernel: linear layers at every total row count in ``rows``,
    attention of one sequence at every per-sequence row count in ``attention_rows``."""
    import torch

    torch_dtype = getattr(torch, dtype)
    out = []
    with torch.inference_mode():
        for op, (in_f, out_f) in layer_shapes(shape).items():
            layer = _linear(in_f, out_f, torch_dtype)
            for r in rows:
                x = torch.randn(r, in_f, dtype=torch_dtype)
                # Bound now: `del layer` below unbinds the loop's name.
                ms = _median_ms(lambda layer=layer, x=x: layer.cpu_linear(x, layer.weight, None),
                                repeats)
                out.append({"op": op, "rows": r, "ms": ms, "in": in_f, "out": out_f})
                if progress is not None:
                    progress.update()
            del layer
        group = shape.heads // shape.kv_heads
        k = torch.randn(shape.kv_heads, context, shape.head_dim, dtype=torch_dtype)
        v = torch.randn(shape.kv_heads, context, shape.head_dim, dtype=torch_dtype)
        scale = shape.head_dim ** -0.5

        def attend(q):
            # r rows × `group` query heads share each key-value head: one matmul per KV head.
            scores = torch.matmul(q, k.transpose(1, 2)) * scale
            return torch.matmul(torch.softmax(scores.float(), dim=-1).to(torch_dtype), v)

        for r in attention_rows or rows:
            q = torch.randn(shape.kv_heads, group * r, shape.head_dim, dtype=torch_dtype)
            ms = _median_ms(lambda q=q: attend(q), repeats)
            out.append({"op": "attention", "rows": r, "ms": ms, "in": context, "out": 0})
            if progress is not None:
                progress.update()
    return pd.DataFrame(out)


def step_kernel_ms(kernels: pd.DataFrame, layers: int, sequences: int, rows_per_seq: int
                   ) -> float:
    """T(N, r): the kernels of one step of N sequences with r rows each."""
    per = kernels.pivot_table(index=["op", "rows"], values="ms")["ms"]
    total = sequences * rows_per_seq
    linear = sum(per[(op, total)] for op in ("qkv", "o", "gate_up", "down"))
    return (layers * (linear + sequences * per[("attention", rows_per_seq)])
            + per[("lm_head", total)])


def verify_delta_ms(kernels: pd.DataFrame, layers: int, batches, gammas) -> pd.DataFrame:
    """Per (batch, γ): the extra kernel time of a verify step over the baseline step."""
    rows = []
    for n in batches:
        base = step_kernel_ms(kernels, layers, n, 1)
        for g in gammas:
            t = step_kernel_ms(kernels, layers, n, g + 1)
            rows.append({"batch": n, "gamma": g, "rows": n * (g + 1), "kernel_ms": t,
                         "kernel_ms_base": base, "delta_ms": t - base})
    return pd.DataFrame(rows)


@dataclass
class MicrobenchConfig:
    model: str | None = None
    dtype: str | None = None   # None: this machine's fast dtype (hardware.resolve_dtype)
    batches: tuple[int, ...] = (1, 4)
    gammas: tuple[int, ...] = (0, 2, 4, 6)
    context: int = 900          # prompt tokens + half the output, as in the sweeps
    repeats: int = 30
    root: str | None = None

    def __post_init__(self):
        self.dtype = resolve_dtype(self.dtype)

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
    """Measure the kernels into a run of kind 'microbench' (the engine's threads and cores)."""
    from tqdm import tqdm

    from specbench.measure.contract import contract
    from specbench.store.runs import DEFAULT_ROOT, create_run
    import torch

    cfg.validate()
    model = cfg.model
    if not model:
        from specbench.engine.assets import embedded_model_dir
        model = str(embedded_model_dir())
    shape = ModelShape.from_hf_config(model)
    # The engine's threads on the engine's cores (one thread on core 0 by default), so a SKU
    # with two engine threads gets the kernel times of two threads.
    from specbench.engine.hardware import engine_cores, hardware_info
    cores = engine_cores(hardware_info())
    torch.set_num_threads(len(cores))
    os.sched_setaffinity(0, set(cores))
    rows = sorted({n * (g + 1) for n in cfg.batches for g in cfg.gammas})
    attention_rows = sorted({g + 1 for g in cfg.gammas})
    manifest = {**contract("microbench", model, cfg.dtype),
                "grid": {"batches": list(cfg.batches), "gammas": list(cfg.gammas),
                         "rows": rows, "attention_rows": attention_rows,
                         "context": cfg.context, "repeats": cfg.repeats},
                "method": METHOD, "torch_threads": torch.get_num_threads(),
                "affinity": sorted(os.sched_getaffinity(0))}
    run = create_run(cfg.root or DEFAULT_ROOT, manifest)
    bar = tqdm(total=len(layer_shapes(shape)) * len(rows) + len(attention_rows),
               desc="microbench", unit="kernel", disable=not progress)
    kernels = time_kernels(shape, rows, cfg.context, cfg.dtype, cfg.repeats, bar,
                           attention_rows)
    bar.close()
    run.write_table("kernels.csv", kernels)
    run.write_table("verify.csv", verify_delta_ms(kernels, shape.layers, cfg.batches,
                                                  cfg.gammas))
    run.finish()
    return run
