"""Draft models as the plan's candidates beside n-gram drafting and speculation off (issue 47).

The plan's acceptance pass reads n-gram acceptance on the operator's own prompts; a draft
model's acceptance on them would need an engine per draft, which the plan does not start. What
the plan can say is what this host's draft sweeps measured (``make measure-drafts``,
:mod:`specbench.derive.drafts`): per draft depth and batch size, the best measured speedup over
the paired γ=0 arm on the Spec-Bench prompts, the per-position acceptance the counters read
there, and the per-position α at which that draft breaks even with its measured in-engine cost.
A draft is a candidate where one of those cells ran faster than no speculation; otherwise the
plan says how far the measured acceptance is from breaking even. The speculative config it
prints names the draft checkpoint the sweep drafted with (``specbench draft --depth K`` builds
it on another machine)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from specbench.derive.drafts import break_even, draft_cells
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["COLUMNS", "draft_candidates", "speculative_config"]

COLUMNS = ["depth", "batch", "gamma", "speedup", "best_any", "alpha", "break_even",
           "candidate", "session_basis", "draft_path"]


def speculative_config(path: str, gamma: int) -> str:
    """vLLM's ``--speculative-config`` for a draft checkpoint at γ."""
    return json.dumps({"method": "draft_model", "model": path, "num_speculative_tokens": gamma})


def _this_host(cells: pd.DataFrame, sku: str, session: str | None) -> tuple[pd.DataFrame, str]:
    """The draft cells of this host session where it has any, else of this SKU's others."""
    mine = cells[cells["sku"] == sku]
    if session is not None and (mine["host_session"] == session).any():
        return mine[mine["host_session"] == session], "this host session"
    return mine[mine["host_session"] == mine["host_session"].iloc[-1]], \
        "another session of this CPU"


def _row(group: pd.DataFrame, even: pd.DataFrame) -> dict:
    bench = group[group["workload"].str.startswith("specbench:")]
    judged = bench if len(bench) else group
    # The speedup of a γ over the Spec-Bench prompts: their geometric mean (speedups are ratios).
    by_gamma = judged.groupby("gamma")["speedup"].apply(lambda s: float(np.exp(np.log(s).mean())))
    gamma = int(by_gamma.idxmax())
    at = judged[judged["gamma"] == gamma]
    depth, batch = group["depth"].iloc[0], group["batch"].iloc[0]
    line = even[(even["depth"] == depth) & (even["batch"] == batch) & (even["gamma"] == gamma)]
    return {"gamma": gamma, "speedup": float(by_gamma.max()),
            "best_any": float(group["speedup"].max()),
            "alpha": float(at["alpha_per_position"].max()),
            "break_even": float(line["break_even_engine"].iloc[0]) if len(line) else np.nan,
            "candidate": bool(by_gamma.max() > 1)}


def draft_candidates(sku: str, session: str | None, root=DEFAULT_ROOT) -> pd.DataFrame:
    """One row per draft depth and batch this host's draft sweeps measured: the best γ on the
    Spec-Bench prompts and its speedup, the best speedup on any workload, the per-position α
    there against its break-even, and whether the draft is a candidate. Empty without any."""
    cells = draft_cells(root)
    if cells.empty or not (cells["sku"] == sku).any():
        return pd.DataFrame(columns=COLUMNS)
    mine, basis = _this_host(cells, sku, session)
    even = break_even(root)
    even = even[(even["sku"] == sku) & (even["host_session"] == mine["host_session"].iloc[0])]
    rows = [{"depth": int(depth), "batch": int(batch), **_row(group, even),
             "session_basis": basis, "draft_path": _path(group)}
            for (depth, batch), group in mine.groupby(["depth", "batch"])]
    return pd.DataFrame(rows, columns=COLUMNS)


def _path(group: pd.DataFrame) -> str | None:
    paths = group["draft_path"].dropna()
    return str(paths.iloc[-1]) if len(paths) else None
