"""The host floor's numbers, for its chapter and the story's findings: the differenced profile
and what it can and cannot say."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.decompose import (OUTSIDE_OPERATORS,
                                        decompose)  # noqa: F401  (the chapter's table)
from specbench.report import wording
from specbench.report.numbers import (
    Numbers,
    floor_split,
    greedy_cells,
    pct,
    regime_summary,
    regime_table,
    run_ids,
)
from specbench.report.wording import claim
from specbench.store.runs import DEFAULT_ROOT, load_runs
from specbench.theory.errors import percent_change

__all__ = ["numbers"]



def numbers(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> Numbers:
    cells = greedy_cells(root, cells)
    floors = load_runs(root, kind="hostfloor")
    n = Numbers()
    # What the runs found over every SKU, in one sentence that does not grow with the store,
    # and whether any of them could test the paper's claim, which is about GPUs.
    table = regime_table(root, cells)
    n.tables["regimes"] = table[table["host-floor run"] != "—"].drop(columns="host-floor run")
    gpu = [r for r in floors if r.manifest["hardware"].get("gpus")]
    summary = regime_summary(table)
    n.add([r for r in table["host-floor run"] if r != "—"],
          regime_summary=summary[0].upper() + summary[1:], floor_skus=len(n.tables["regimes"]),
          gpu_floor=(f"the store holds {len(gpu)} GPU host-floor "
                     f"run{'s' if len(gpu) != 1 else ''} to test it" if gpu else
                     "the store holds no GPU host-floor run yet, so these runs do not test it"))
    if not floors:
        n.add(have_floor="no host-floor run yet")
        return n
    run = floors[-1]
    per_step, families, layers = floor_split(run)
    small, large = per_step.iloc[0], per_step.iloc[1]
    labels = cells[cells["sku"] == run.sku]["sku_label"]
    n.add([run.run_id], have_floor="a stored host-floor run", floor_sku=run.sku,
          floor_run=run.run_id,
          floor_label=labels.iloc[0] if len(labels) else run.sku,
          tokens_n=int(run.manifest["grid"]["tokens"][-1]),
          small_label=small["model"], large_label=large["model"])
    _add_step_split(n, per_step, families, layers)
    base = cells[(cells["sku"] == run.sku) & (cells["gamma"] == 0) & (cells["batch"] == 1)
                 & (cells["workload"] == "repeat")]
    if len(base):
        sweep_step = float(base["pot_ms"].iloc[0])
        n.add(run_ids(base), sweep_step_ms=sweep_step,
              sweep_agreement_pct=float(percent_change(small["unprofiled_wall_ms"],
                                                       sweep_step)))
    else:
        n.add(sweep_step_ms=float("nan"), sweep_agreement_pct=float("nan"))
    return n


def _add_step_split(n: Numbers, per_step: pd.DataFrame, families: pd.DataFrame,
                    layers: dict) -> None:
    """Each model's step split into compute and host-exposed time, and whether the host part
    stays put when the model grows."""
    small, large = per_step.iloc[0], per_step.iloc[1]
    for name, row in (("small", small), ("large", large)):
        n.add(**{f"{name}_wall_ms": float(row["wall_ms"]),
                 f"{name}_compute_ms": float(row["compute_ms"]),
                 f"{name}_host_ms": float(row["host_ms"]),
                 f"{name}_host_pct": pct(row["host_share"]),
                 f"{name}_compute_pct": pct(1 - row["host_share"]),
                 f"{name}_unprofiled_ms": float(row["unprofiled_wall_ms"]),
                 f"{name}_regime": wording.regime(float(row["host_share"])),
                 f"{name}_layers": int(layers.get(row["model"], 0))})
    n.add(wall_identity=claim(np.allclose(per_step["compute_ms"] + per_step["host_ms"],
                                          per_step["wall_ms"]),
                              "compute plus host-exposed time is the step's wall time"))
    host_ratio = float(large["host_ms"] / small["host_ms"])
    invariant = (abs(percent_change(float(large["host_ms"]), float(small["host_ms"])))
                 < wording.MODEL_SIZE_INVARIANT_PCT)
    n.add(compute_ratio=float(large["compute_ms"] / small["compute_ms"]), host_ratio=host_ratio,
          host_invariance="model-size invariant" if invariant else "not model-size invariant",
          host_vs_paper=("as the paper found on GPUs" if invariant else
                         "where the paper found it invariant on GPUs"),
          layers_sentence=_layers_sentence(int(layers.get(small["model"], 0)),
                                           int(layers.get(large["model"], 0))))
    fam = families.set_index(["model", "family"])["ms"]
    for name, row in (("small", small), ("large", large)):
        n.add(**{f"{name}_other_ops_ms": float(fam.get((row["model"], "host/other"), np.nan)),
                 f"{name}_outside_ms": float(fam.get((row["model"], OUTSIDE_OPERATORS),
                                                     np.nan))})


def _layers_sentence(small_layers: int, large_layers: int) -> str:
    if large_layers <= small_layers:
        return (f"The larger shape has fewer layers than the small model ({large_layers} "
                f"against {small_layers}), so dispatch paid per layer cannot be what grows")
    return (f"The larger shape also has more layers ({large_layers} against {small_layers}), "
            "so per-layer dispatch may contribute to the growth")

