"""The harness's own cost, from a stored overhead run (:mod:`specbench.measure.overhead`): the
ratio of medians with and without the in-line counter reads."""
from __future__ import annotations

import pandas as pd

from specbench.theory.errors import percent_change

__all__ = ["overhead_summary"]


def overhead_summary(table: pd.DataFrame) -> dict:
    """Medians with and without the reads, and the overhead in percent."""
    med = table.groupby("read_counters")[["wall_s", "pot_ms"]].median()
    return {"wall_with_s": med.loc[True, "wall_s"], "wall_without_s": med.loc[False, "wall_s"],
            "overhead_pct": percent_change(med.loc[True, "wall_s"], med.loc[False, "wall_s"]),
            "pot_overhead_pct": percent_change(med.loc[True, "pot_ms"], med.loc[False, "pot_ms"])}
