"""Differencing: a decode step's wall, compute and host-exposed time from two profiles.

The same decode is profiled twice, generating 1 and N tokens. Everything paid once per call —
engine warmup, scheduling of the request, prefill, load — appears in both and cancels in the
difference; what remains is N−1 decode steps. Dividing by N−1 gives the per-step wall time and
the per-step compute time; the host-exposed time is their difference. The profiles come from
:mod:`specbench.measure.profiler` (CPU) or :mod:`specbench.measure.nsys` (GPU), or from a
stored host-floor run; this module only does arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HOST_FAMILY", "OUTSIDE_OPERATORS", "StepProfile", "difference", "decompose"]

HOST_FAMILY = "host/other"
OUTSIDE_OPERATORS = "host: outside any operator"


@dataclass(frozen=True)
class StepProfile:
    """Totals of one profiled call generating ``tokens`` tokens (milliseconds)."""
    tokens: int
    wall_ms: float
    families_ms: dict[str, float]

    @property
    def compute_ms(self) -> float:
        return sum(v for k, v in self.families_ms.items() if k != HOST_FAMILY)


def difference(short: StepProfile, long: StepProfile) -> dict:
    """Per-step decomposition from two profiles of the same decode (1 and N tokens)."""
    steps = long.tokens - short.tokens
    if steps <= 0:
        raise ValueError(f"the long profile must generate more tokens than the short one, got "
                         f"{long.tokens} and {short.tokens}")
    wall = (long.wall_ms - short.wall_ms) / steps
    compute = (long.compute_ms - short.compute_ms) / steps
    families = {f: (long.families_ms.get(f, 0.0) - short.families_ms.get(f, 0.0)) / steps
                for f in sorted(set(long.families_ms) | set(short.families_ms))}
    return {"steps": steps, "wall_ms": wall, "compute_ms": compute,
            "host_ms": wall - compute, "host_share": (wall - compute) / wall,
            "families_ms": families}


def decompose(steps, families) -> tuple:
    """Per-step decomposition per model (median over repetitions) and family shares."""
    import pandas as pd

    rows, shares = [], []
    for (model, rep), g in steps.groupby(["model", "rep"]):
        short, long = g.loc[g["tokens"].idxmin()], g.loc[g["tokens"].idxmax()]
        fam = families[(families["model"] == model) & (families["rep"] == rep)]
        by = {n: dict(zip(f["family"], f["self_ms"], strict=True))
              for n, f in fam.groupby("tokens")}
        d = difference(
            StepProfile(int(short["tokens"]), short["wall_ms"], by.get(short["tokens"], {})),
            StepProfile(int(long["tokens"]), long["wall_ms"], by.get(long["tokens"], {})))
        unprofiled = (long["unprofiled_wall_ms"] - short["unprofiled_wall_ms"]) / d["steps"]
        rows.append({"model": model, "rep": rep, "wall_ms": d["wall_ms"],
                     "compute_ms": d["compute_ms"], "host_ms": d["host_ms"],
                     "unprofiled_wall_ms": unprofiled})
        shares += [{"model": model, "rep": rep, "family": f, "ms": ms}
                   for f, ms in d["families_ms"].items()]
    per_step = pd.DataFrame(rows).groupby("model").median(numeric_only=True).drop(columns="rep")
    per_step["host_share"] = per_step["host_ms"] / per_step["wall_ms"]
    fam = pd.DataFrame(shares).groupby(["model", "family"])["ms"].median().reset_index()
    # Time inside no profiled operator (Python scheduling, inter-process hops, output
    # processing) is host-exposed too; shares are of the per-step wall time.
    outside = (per_step["wall_ms"] - fam.groupby("model")["ms"].sum()).rename("ms").reset_index()
    fam = pd.concat([fam, outside.assign(family=OUTSIDE_OPERATORS)], ignore_index=True)
    fam["share"] = fam["ms"] / fam["model"].map(per_step["wall_ms"])
    return per_step.reset_index(), fam
