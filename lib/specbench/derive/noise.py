"""How noisy was the host, read from a run's stored tables: the foreign-CPU threshold of a loaded
call (the foreign cores themselves are measured by :class:`specbench.measure.load.ForeignCpu`)
and the repetitions' disagreement.

A host can be noisy with nobody else on it — a neighbour on the physical machine, a slower
memory path — and then only the timings show it: :func:`repetition_cv_pct` reads a run's
noise from how much repetitions of the same call disagree.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["MAX_FOREIGN_CORES", "NOISY_HOST_CV_PCT", "repetition_cv_pct"]

# A timed call is flagged as measured under load when other processes used more than this many
# cores on average while it ran (the sweep's and the serving chapter's threshold).
MAX_FOREIGN_CORES = 0.25

# A run is from a noisy host when the repetitions of the same call vary by more than this (the
# median over its requests of their coefficient of variation, in percent). The stored runs fall
# on either side of it with a gap: 1.0–3.6 % in the quiet ones, 6.8–11.7 % in the noisy ones,
# whose γ=0 step also ran slower than on the same kind of machine before, with no foreign CPU
# time in either — the noise is the host's, which the foreign-CPU check cannot see
# (tests/test_host_noise.py).
NOISY_HOST_CV_PCT = 5.0


def repetition_cv_pct(table: pd.DataFrame) -> float:
    """A sweep's host noise: the median over its timed requests (each cell and arm apart) of
    the coefficient of variation of their per-token latency across repetitions, in percent.
    ``table`` is the run's requests.csv, or for runs without one its reps.csv (then per cell:
    a repetition's mean over several prompts varies less than one call). Unlike the range, the
    CV does not grow with the number of repetitions; a shared γ=0 arm, copied under each γ,
    counts once. NaN where nothing was repeated."""
    key = [c for c in ("workload", "gamma", "batch", "temperature", "arm", "request")
           if c in table]
    r = table.dropna(subset=["pot_ms"])
    r = r.drop_duplicates([k for k in key if k != "gamma"] + ["rep", "pot_ms"])
    stats = r.groupby(key)["pot_ms"].agg(["std", "mean", "count"])
    stats = stats[stats["count"] >= 2]
    return float((100 * stats["std"] / stats["mean"]).median()) if len(stats) else np.nan
