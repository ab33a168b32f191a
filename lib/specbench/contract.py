"""The benchmark contract: what every run's manifest states about how it was measured.

The economics document asks that every run name its model and tokenizer hashes, the engine
and its version, the hardware (GPU model, driver and CUDA; or CPU model and threads), the
dtype, the engine settings and the code revision, so that two runs can be compared arm for
arm. :func:`contract` gathers those fields; each kind of run adds its own grid and tables.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from .engine import EngineSettings, engine_version, hardware_info, sku_id
from .roofline import SKUS, ModelShape
from .runs import code_revision, sha256_file

__all__ = ["contract", "model_identity", "model_shape", "roofline_sku", "cpu_threads"]


def model_identity(model: str) -> dict:
    """Name and content hashes of a local checkpoint (weights, tokenizer) for the manifest."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return {"name": model, "path": model, "weights_sha256": "unavailable (hub id)",
                "tokenizer_sha256": "unavailable (hub id)"}
    weights = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    tokenizer = path / "tokenizer.json"
    provenance = path / "specbench-provenance.json"
    return {
        "name": path.name, "path": str(path),
        "weights_sha256": {w.name: sha256_file(w) for w in weights},
        "tokenizer_sha256": sha256_file(tokenizer) if tokenizer.exists() else "absent",
        "provenance": (json.loads(provenance.read_text())
                       if provenance.exists() else None),
    }


def cpu_threads(hardware: dict) -> int:
    """OpenMP threads vLLM's CPU backend uses: the cores in VLLM_CPU_OMP_THREADS_BIND, or by
    default ('auto') the cores it may use less those it reserves (one, unless told)."""
    bind = hardware.get("vllm_cpu_omp_threads_bind", "auto")
    if bind in ("auto", "all", "nobind"):
        reserved = hardware.get("vllm_cpu_num_of_reserved_cpu", "default")
        reserved = 1 if reserved == "default" else int(reserved)
        return max(1, hardware["cpu_affinity"] - reserved)
    count = 0
    for part in bind.split("|")[0].split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def model_shape(model: str, dtype: str) -> dict | None:
    """The model's shape for the roofline, from its config.json (None for a hub id)."""
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        return None
    size = DTYPE_BYTES.get(dtype, 2)
    return asdict(ModelShape.from_hf_config(path, name=path.name, weight_bytes=size,
                                            act_bytes=size))


def roofline_sku(hardware: dict, threads: int | None, dtype: str = "bfloat16") -> dict | None:
    """The roofline ceilings of this hardware: a datasheet GPU, or a CPU measured now by
    :func:`specbench.roofline.measure_cpu_sku` in a child process pinned to ``threads``."""
    if hardware.get("gpus"):
        name = hardware["gpus"][0]["name"].lower()
        key = "h200" if "h200" in name else "h100-sxm" if "h100" in name else None
        return asdict(SKUS[key]) if key else None
    n = str(threads or 1)
    env = {**os.environ, "OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n}
    code = ("import json, dataclasses; from specbench.roofline import measure_cpu_sku; "
            f"print(json.dumps(dataclasses.asdict(measure_cpu_sku(threads={n}, dtype={dtype!r}))))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def contract(kind: str, model: str, dtype: str, **settings) -> dict:
    """The manifest fields shared by every kind of run."""
    hardware = hardware_info()
    threads = None if hardware["gpus"] else cpu_threads(hardware)
    engine_settings = asdict(EngineSettings(model=model, dtype=dtype, **settings))
    return {
        "kind": kind,
        "sku": sku_id(hardware, dtype, threads),
        "code": code_revision(),
        "model": model_identity(model),
        "engine": {**engine_version(),
                   "settings": {k: v for k, v in engine_settings.items()
                                if k not in ("model", "gamma")},
                   "speculative_method": "ngram",
                   "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}},
        "hardware": {**hardware, "threads": threads},
        "dtype": dtype,
        "model_shape": model_shape(model, dtype),
        "roofline_sku": roofline_sku(hardware, threads, dtype),
    }
