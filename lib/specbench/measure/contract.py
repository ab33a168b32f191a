"""The benchmark contract: what every run's manifest states about how it was measured.

The economics document asks that every run name its model and tokenizer hashes, the engine
and its version, the hardware (GPU model, driver and CUDA; or CPU model and threads), the
dtype, the engine settings and the code revision, so that two runs can be compared arm for
arm. :func:`contract` gathers those fields from the engine and the hardware — so it is
measurement's, not the store's; each kind of run adds its own grid and tables.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from specbench.engine.hardware import (cpu_threads, hardware_info, host_fingerprint,
                                       model_shape, roofline_sku, sku_id)
from specbench.engine.vllm_engine import EngineSettings, engine_version
from specbench.store.runs import code_revision, sha256_file
from specbench.theory.roofline import roofline_status

__all__ = ["contract", "model_identity"]


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


def _engine_block(engine_name: str, model: str, dtype: str, settings: dict) -> tuple[dict, str]:
    """The manifest's engine block and the SKU id suffix of the engine that measures."""
    if engine_name == "transformers":
        from specbench.engine.transformers_engine import (SKU_SUFFIX, HFEngineSettings,
                                                          hf_engine_version)
        hf = HFEngineSettings(model=model, dtype=dtype, **settings)
        return ({**hf_engine_version(),
                 "settings": {k: v for k, v in asdict(hf).items() if k not in ("model", "gamma")},
                 **hf.manifest_fields()}, SKU_SUFFIX)
    engine = EngineSettings(model=model, dtype=dtype, **settings)
    return ({**engine_version(),
             "settings": {k: v for k, v in asdict(engine).items() if k not in ("model", "gamma")},
             **engine.manifest_fields(),
             "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}}, "")


def contract(kind: str, model: str, dtype: str, engine: str = "vllm", **settings) -> dict:
    """The manifest fields shared by every kind of run. A SKU is hardware × engine: vLLM SKU ids
    name the hardware; another engine appends its suffix ('-hf' for transformers)."""
    hardware = hardware_info()
    threads = None if hardware["gpus"] else cpu_threads(hardware)
    engine_block, suffix = _engine_block(engine, model, dtype, settings)
    shape, ceilings = model_shape(model, dtype), roofline_sku(hardware, threads, dtype)
    return {
        "kind": kind,
        "sku": sku_id(hardware, dtype, threads) + suffix,
        "code": code_revision(),
        "model": model_identity(model),
        "engine": engine_block,
        "hardware": {**hardware, "threads": threads},
        # The host and its boot: a calibration holds for one host session, not a CPU kind.
        "host": host_fingerprint(),
        "dtype": dtype,
        "model_shape": shape,
        "roofline_sku": ceilings,
        # Which roofline d(γ) comes from, or why there is none (never a silent d = 0).
        "roofline": roofline_status(shape, ceilings),
    }
