"""How quiet was the machine? CPU time used by *other* processes while we measured.

The load average counts the engine's own threads too (on two cores vLLM alone keeps it near
two), so it cannot tell contention from the measurement itself. :class:`ForeignCpu` takes the
machine's busy CPU time over a block and subtracts what this process and its children (the
engine core) used: what is left was used by someone else (hypervisor steal included).

A host can be noisy with nobody else on it — a neighbour on the physical machine, a slower
memory path — and then only the timings show it: :func:`repetition_cv_pct` reads a run's
noise from how much repetitions of the same call disagree.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import psutil

__all__ = ["MAX_FOREIGN_CORES", "NOISY_HOST_CV_PCT", "ForeignCpu", "repetition_cv_pct"]

# A timed call is flagged as measured under load when other processes used more than this many
# cores on average while it ran (the sweep's and the serving chapter's threshold).
MAX_FOREIGN_CORES = 0.25

# A run is from a noisy host when the repetitions of the same call vary by more than this (the
# median over its requests of their coefficient of variation, in percent). Measured on the
# 2-core machines of this workplace: 1.0–3.6 % in the quiet runs, 6.8–11.7 % in the noisy ones
# (a Zen 3 on 1 December; a Zen 4 and a Zen 5 on 2 December, whose γ=0 step ran up to ~40 %
# slower than on the same kind before), with no foreign CPU time in either
# (tests/test_host_noise.py).
NOISY_HOST_CV_PCT = 5.0


def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _own_s() -> float:
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            c = proc.cpu_times()
            total += c.user + c.system
        except psutil.Error:  # a child that ended meanwhile
            pass
    return total


class ForeignCpu:
    """Context manager: ``foreign_cores`` is the average number of cores others kept busy."""

    def __enter__(self):
        self._busy, self._own, self._wall = _busy_s(), _own_s(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self._wall
        foreign = max(0.0, (_busy_s() - self._busy) - (_own_s() - self._own))
        self.foreign_cpu_s = foreign
        self.foreign_cores = foreign / wall if wall > 0 else 0.0
        return False


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
