"""Do a sweep's engines run the same work at the same speed?

A sweep starts one engine per γ (the γ=0 engine serves the shared base arm) and pairs each γ's
calls with the base's, interleaved, so that a host growing slower or faster over the run
cancels in the speedup. What pairing cannot cancel is an engine *instance* that is slower than
its siblings for its whole life. The step records can see it: a plain step (one row decoding
one token, no drafts, no prefill) is the same work on every engine, and the speculative
engines do a little more of it (the n-gram lookup, the speculative sampler), so the γ=0
engine's plain step should be the fastest. On the Intel host one `make measure` had its γ=0
engine's plain step slower than its speculative engines' in every minute of the run, while
the other sweeps of the same host had it faster: that run's 'open' cells showed a speedup
with nothing accepted. Such a run is kept (it is a measurement of what the host does) and
named, not used as a calibration of speed (the step chapter lists every sweep's numbers).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.steps import step_table
from specbench.store.runs import Run
from specbench.theory.errors import percent_change

__all__ = ["SLOWER_BASE_PCT", "plain_steps", "base_over_speculative_pct", "agreement_row"]

#: The γ=0 engine's plain step slower than the speculative engines' (median) by more than
#: this: the engine instances differ (the agreeing sweeps stored have it *faster*).
SLOWER_BASE_PCT = 5.0


def plain_steps(table: pd.DataFrame) -> pd.Series:
    """Median plain-step time (ms) per engine γ: steps holding one decoding row, no drafts and
    no prefill."""
    plain = table[(table["decode_tokens"] == 1) & (table["draft_tokens"] == 0)
                  & (table["prefill_tokens"] == 0)]
    return plain.groupby("engine_gamma")["duration_ns"].median() / 1e6


def base_over_speculative_pct(medians: pd.Series) -> float:
    """How much slower the γ=0 engine's plain step is than the median of the speculative
    engines' (percent; negative: faster, as it should be). NaN without both kinds."""
    base = medians.get(0, np.nan)
    speculative = medians[medians.index > 0]
    if not np.isfinite(base) or speculative.empty:
        return float("nan")
    return float(percent_change(base, speculative.median()))


def agreement_row(run: Run) -> dict:
    """One sweep's plain-step medians per engine and its verdict."""
    table = step_table(run.path, run.parts(), run.manifest.get("step_probe"))
    medians = plain_steps(table) if not table.empty else pd.Series(dtype=float)
    slower = base_over_speculative_pct(medians)
    return {"run": run.run_id, "sku": run.sku,
            "base_plain_ms": float(medians.get(0, np.nan)),
            "speculative_plain_ms": float(medians[medians.index > 0].median()),
            "base_slower_pct": slower,
            "engines_agree": bool(not slower > SLOWER_BASE_PCT)}
