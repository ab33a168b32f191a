"""The planner judged by its regret on held-out SKUs.

For every held-out (SKU, workload, batch) of leave-one-SKU-out, each rule picks a γ (γ = 0,
speculation off, counts as a choice, with its measured t_base as its latency):

* the planner: the γ whose leave-one-SKU-out prediction is lowest (nothing of the held-out
  SKU's speculative cells enters it), off unless some γ is predicted faster than t_base;
* ratio transfer: the γ with the best speedup carried over from the other SKUs;
* a fixed γ = 4, and "always off" (γ = 0).

Regret = measured per-token latency at the chosen γ / the best measured γ's − 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.report.plan.gamma import recommend
from specbench.theory.errors import percent_change, percent_error

__all__ = ["FIXED_GAMMA", "RULES", "regret_table", "regret_summary"]

FIXED_GAMMA = 4
RULES = ("planner", "ratio transfer", f"fixed γ={FIXED_GAMMA}", "always off")


def _choose(pots: dict[int, float]) -> int:
    """The one γ rule on a rule's predicted pots (γ=0 is t_base)."""
    return recommend(pots, pots[0])


def regret_table(loso: pd.DataFrame) -> pd.DataFrame:
    """One row per held-out (SKU, workload, batch): each rule's γ and its regret."""
    rows = []
    for (sku, workload, batch), g in loso.groupby(["sku", "workload", "batch"]):
        t_base = float(g["t_base_ms"].median())
        measured = {0: t_base, **dict(zip(g["gamma"].astype(int), g["measured_pot_ms"],
                                          strict=True))}
        best = min(measured.values())
        choices = {
            "planner": _choose({0: t_base, **dict(zip(g["gamma"].astype(int),
                                                      g["model_pot_ms"], strict=True))}),
            "ratio transfer": _choose({0: t_base, **dict(zip(g["gamma"].astype(int),
                                                             g["ratio_pot_ms"], strict=True))}),
            f"fixed γ={FIXED_GAMMA}": FIXED_GAMMA if FIXED_GAMMA in measured else np.nan,
            "always off": 0}
        row = {"sku": sku, "workload": workload, "batch": int(batch),
               "best γ": min(measured, key=lambda k: (measured[k], k))}
        # Why the planner chose as it did: its prediction's error at its choice and at the best.
        err = dict(zip(g["gamma"].astype(int),
                       percent_error(g["model_pot_ms"], g["measured_pot_ms"]), strict=True))
        err[0] = 0.0   # γ=0 is measured, not predicted
        row["planner: error at its γ %"] = err[choices["planner"]]
        row["planner: error at best γ %"] = err[row["best γ"]]
        for rule, gamma in choices.items():
            row[f"{rule}: γ"] = gamma
            row[f"{rule}: regret %"] = (percent_change(measured[gamma], best)
                                        if gamma == gamma else np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def regret_summary(regrets: pd.DataFrame) -> pd.DataFrame:
    """Median and worst regret of each rule over the held-out groups."""
    return pd.DataFrame([{"rule": rule,
                          "median regret %": float(regrets[f"{rule}: regret %"].median()),
                          "worst regret %": float(regrets[f"{rule}: regret %"].max()),
                          "groups": int(regrets[f"{rule}: regret %"].notna().sum())}
                         for rule in RULES])
