"""Per-position acceptance from the engine's counters, per stored repetition."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.sweep_tables import cell_records
from specbench.store.runs import Run

__all__ = ["per_position_acceptance", "counter_rows"]


def _positions(text) -> list[int]:
    if not isinstance(text, str) or not text.strip():
        return []
    return [int(float(x)) for x in text.split(";")]


def per_position_acceptance(reps: pd.DataFrame) -> pd.DataFrame:
    """Per cell (workload, γ, batch), from the counters summed over repetitions:

    * ``drafts`` N, ``accepted_at_pos`` a_0…a_{γ−1} (drafts whose position i was accepted);
    * ``alpha_first`` = a_0 / N, the first position's acceptance;
    * ``alpha_per_position`` — the independent per-position α of the worksheet's formula,
      fitted by maximum likelihood to the accepted prefix lengths: each draft accepts L ≤ γ
      tokens with P(L) = α^L(1−α) for L < γ and α^γ for L = γ, so α̂ = A / (A + N − a_{γ−1})
      with A = Σ a_i (every counted quantity; no timing);
    * ``aggregate_r`` = accepted / proposed, the telemetry fraction that is *not* that α.

    The fit assumes every draft proposed γ tokens (vLLM counts γ draft tokens per draft); a
    draft cut short near the end of the text counts as rejected at its missing positions.
    """
    spec = reps[reps["gamma"] > 0]
    rows = []
    for (w, g, b), group in spec.groupby(["workload", "gamma", "batch"]):
        width = int(g)
        per_pos = np.zeros(width)
        for text in group.get("accepted_per_pos", pd.Series(dtype=object)):
            values = _positions(text)[:width]
            per_pos[:len(values)] += values
        drafts, accepted = int(group["drafts"].sum()), float(per_pos.sum())
        proposed = int(group["draft_tokens"].sum())
        not_full = drafts - per_pos[-1]
        alpha_pp = (accepted / (accepted + not_full) if accepted + not_full > 0 else np.nan)
        rows.append({"workload": w, "gamma": int(g), "batch": int(b), "drafts": drafts,
                     "accepted_at_pos": ";".join(str(int(x)) for x in per_pos),
                     "alpha_first": per_pos[0] / drafts if drafts else np.nan,
                     "alpha_per_position": alpha_pp,
                     "aggregate_r": (group["accepted_tokens"].sum() / proposed
                                     if proposed else np.nan)})
    return pd.DataFrame(rows, columns=["workload", "gamma", "batch", "drafts", "accepted_at_pos",
                                       "alpha_first", "alpha_per_position", "aggregate_r"])


def counter_rows(run: Run) -> pd.DataFrame:
    """The speculative arm's counter deltas per timed call or repetition, with per-position
    acceptance: from reps.csv where it has ``accepted_per_pos`` (runs before the paired
    design), else from the calls stored in the run's parts. Greedy cells only."""
    reps = run.table("reps.csv")
    if "accepted_per_pos" in reps:
        return reps
    rows = []
    for record in cell_records(run.parts()).values():
        if record.get("status") != "ok" or record.get("temperature", 0.0):
            continue
        for call in record.get("calls", []):
            counters = call.get("counters") or {}
            if call.get("arm") != "spec" or not counters:
                continue
            rows.append({"workload": record["workload"], "gamma": record["gamma"],
                         "batch": record["batch"],
                         **{k: counters.get(k, 0) for k in ("drafts", "draft_tokens",
                                                            "accepted_tokens")},
                         "accepted_per_pos": counters.get("accepted_per_pos", "")})
    columns = ["workload", "gamma", "batch", "drafts", "draft_tokens", "accepted_tokens",
               "accepted_per_pos"]
    return pd.DataFrame(rows, columns=columns)


