"""Service level objectives: the per-request limits a serving run's goodput and its cost per
million SLO-qualified tokens are counted against, and the two defaults (a 2-core CPU and a
datacenter GPU) with why each."""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SLO", "CPU_SLO", "GPU_SLO"]


@dataclass(frozen=True)
class SLO:
    """Per-request limits, in milliseconds; a request qualifies when it meets both (the
    client's ``--goodput`` rule). A level *meets the SLO at p95* when its p95 TTFT and p95
    TPOT are within the limits, i.e. at least 95 % of requests qualify on each."""
    ttft_ms: float
    tpot_ms: float
    why: str = ""

    def validate(self) -> None:
        for name in ("ttft_ms", "tpot_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"SLO {name} must be a positive number of milliseconds, "
                                 f"got {value!r}")

    def goodput_args(self) -> list[str]:
        return ["--goodput", f"ttft:{self.ttft_ms:g}", f"tpot:{self.tpot_ms:g}"]


# Why these defaults. On 2-core CPUs of this kind the 135M model decodes one request at
# ~20-60 ms per token and prefills a ~700-token prompt in ~0.6-1.1 s. TPOT 150 ms is reading
# speed (~6-7 tokens/s, what a streaming chat must beat) and leaves room for a slowdown under
# load; TTFT 3 s leaves room for a few long prefills queued ahead. On a datacenter GPU, public
# interactive-serving limits are of the order of 0.5 s to first token and 40-50 ms per token
# (e.g. MLPerf Inference's interactive LLM scenario); 500 ms / 50 ms is that order.
CPU_SLO = SLO(3000.0, 150.0, "2-core CPU, 135M model: TPOT at reading speed (~6-7 tok/s), "
              "TTFT room for a few ~700-token prefills (~0.6-1.1 s each) queued")
GPU_SLO = SLO(500.0, 50.0, "datacenter GPU: interactive-serving limits of the order used "
              "by public benchmarks (~0.5 s to first token, 40-50 ms per token)")
