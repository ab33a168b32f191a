"""How quiet was the machine? CPU time used by *other* processes while we measured.

The load average counts the engine's own threads too (on two cores vLLM alone keeps it near
two), so it cannot tell contention from the measurement itself. :class:`ForeignCpu` takes the
machine's busy CPU time over a block and subtracts what this process and its children (the
engine core) used: what is left was used by someone else (hypervisor steal included).

What counts as loaded, and the noise a host shows in its timings alone, are read from the
stored tables by :mod:`specbench.derive.noise`.
"""
from __future__ import annotations

import time

import psutil

__all__ = ["ForeignCpu"]


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
