"""The economics worksheet on measured data: break-even acceptance, priced decisions on whole
replicas, and a hypothetical draft model's KV-capacity loss."""
from __future__ import annotations

import numpy as np
import pandas as pd

from specbench.derive.drafts import engine_of
from specbench.report.plan.from_runs import latest_sweeps, ok_cells
from specbench.report.plan.gamma import model_inputs, run_acceptance
from specbench.report.plan.negative import rep_intervals
from specbench.store.runs import DEFAULT_ROOT, Run, load_runs
from specbench.theory import economics
from specbench.theory._validate import check
from specbench.theory.errors import percent_change
from specbench.theory.roofline import ModelShape

__all__ = ["break_even_table", "priced", "priced_decisions", "draft_costs",
           "kv_bytes_per_token", "hypothetical_draft_kv", "PRICE_PER_REPLICA_HOUR",
           "ITL_SLO_MS", "DEMAND_TOKENS_PER_S"]

# The worksheet's illustrative assumptions — not measurements, not quoted from anywhere —
# stated once for every chapter that prices a replica.
PRICE_PER_REPLICA_HOUR = 1.0     # USD per replica-hour
ITL_SLO_MS = 40.0                # per output token, met by the slowest repetition's median
DEMAND_TOKENS_PER_S = 500.0      # output tokens per second the fleet serves

# -- economics on measured data ------------------------------------------------------------

def _break_even(gamma: int, v: float) -> float:
    try:
        return economics.break_even_alpha(int(gamma), 0.0, v)
    except ValueError:   # not even α = 1 pays at this overhead
        return np.nan


def break_even_table(root=DEFAULT_ROOT, headline_cells: pd.DataFrame | None = None
                     ) -> pd.DataFrame:
    """Per SKU × batch × workload × γ of each SKU's latest sweep: the engine's verification
    overhead v, the break-even per-position α at that v, and where the workload's measured
    per-position α sits.

    The worksheet charges a speculative iteration 1 + k·(c + v) baseline steps. Here k = γ,
    c = 0 (n-gram drafting runs no draft model; its CPU lookup is inside the host terms) and
    the model charges (t_base·(1 + d(γ)) + h) / t_base, so v = (d(γ) + h/t_base) / γ.
    """
    if headline_cells is None:   # the model's inputs (analysis.sweep_cells), read once
        from specbench.derive.analysis import sweep_cells
        headline_cells = sweep_cells(root, every_session=True)
    rows = []
    for run in latest_sweeps(root):
        cells = ok_cells(run)
        acceptance = run_acceptance(run)
        pp = acceptance.set_index(["workload", "gamma", "batch"])
        for (w, b), group in cells.groupby(["workload", "batch"]):
            if not (group["gamma"] == 0).any():
                continue
            inputs = model_inputs(cells, run, int(b), w, headline_cells, root, acceptance)
            for gamma in sorted(inputs.alpha_by_gamma):
                v = (inputs.d_by_gamma[gamma] + inputs.h_ms / inputs.t_base_ms) / gamma
                be = _break_even(gamma, v)
                acc = pp.loc[(w, gamma, int(b))] if (w, gamma, int(b)) in pp.index else None
                alpha_pp = float(acc["alpha_per_position"]) if acc is not None else np.nan
                cell = cells[(cells["workload"] == w) & (cells["batch"] == b)
                             & (cells["gamma"] == gamma)].iloc[0]
                rows.append({"run_id": run.run_id, "sku": run.sku, "batch": int(b),
                             "workload": w, "gamma": gamma, "v": v, "break_even_alpha": be,
                             "alpha_per_position": alpha_pp,
                             "alpha_first": float(acc["alpha_first"]) if acc is not None
                             else np.nan,
                             "aggregate_r": float(acc["aggregate_r"]) if acc is not None
                             else np.nan,
                             "side": ("no break-even" if np.isnan(be) else
                                      "above" if alpha_pp > be else "below"),
                             "measured_speedup": float(cell["speedup"])})
    return pd.DataFrame(rows)


def priced(price_per_replica_hour: float, itl_slo_ms: float, demand_tokens_per_s: float,
           root=DEFAULT_ROOT, runs: list[Run] | None = None) -> pd.DataFrame:
    """Cost per million SLO-qualified accepted tokens, whole replicas, per measured cell.

    A replica is one engine as measured (one SKU, one batch size). Its decode throughput is
    batch × 1000 / pot_ms output tokens per second — every output token is an accepted token
    (rejected drafts emit nothing), prefill excluded as in the manifests. A cell meets the SLO
    when the slowest repetition's median per-token latency is within ``itl_slo_ms``; a cell
    that misses it qualifies no tokens and gets no price. Replicas = ceil(demand / throughput),
    all paid for, serving exactly the demand. ``usd_per_million_any`` is that price whether or
    not the SLO is met (what the fleet would cost at a looser SLO). ``runs``: these runs
    instead of each SKU's latest sweep (a draft sweep's, say).
    """
    for name, value in [("price_per_replica_hour", price_per_replica_hour),
                        ("itl_slo_ms", itl_slo_ms), ("demand_tokens_per_s", demand_tokens_per_s)]:
        check(name, value, low=0, low_open=True)
    rows = []
    for run in latest_sweeps(root) if runs is None else runs:
        intervals = rep_intervals(run)
        for _, c in ok_cells(run).iterrows():
            key = (c["workload"], int(c["gamma"]), int(c["batch"]), "spec")
            slowest = float(intervals.loc[key, "pot_ms_max"]) if key in intervals.index \
                else float(c["pot_ms"])
            tokens_per_s = int(c["batch"]) * 1000.0 / float(c["pot_ms"])
            meets = slowest <= itl_slo_ms
            fleet, any_cost = economics.cost_per_million(
                1, price_per_replica_hour, tokens_per_s, demand_tokens_per_s,
                demand_tokens_per_s)
            replicas, cost = (fleet, any_cost) if meets else (np.nan, np.nan)
            rows.append({"run_id": run.run_id, "sku": run.sku, "workload": c["workload"],
                         "batch": int(c["batch"]), "gamma": int(c["gamma"]),
                         "pot_ms": float(c["pot_ms"]), "slowest_rep_pot_ms": slowest,
                         "tokens_per_s": tokens_per_s, "meets_slo": meets,
                         "replicas": replicas, "usd_per_million": cost,
                         "usd_per_million_any": any_cost})
    return pd.DataFrame(rows)


def priced_decisions(price: pd.DataFrame) -> pd.DataFrame:
    """Per SKU × workload × batch of :func:`priced`: the γ=0 cost, the cheapest γ and its cost
    (NaN where no γ meets the SLO), and the saving against γ=0 where both qualify."""
    rows = []
    for (sku, w, b), g in price.groupby(["sku", "workload", "batch"], sort=False):
        base = g[g["gamma"] == 0].iloc[0]
        ok = g[g["meets_slo"]]
        best = ok.loc[ok["usd_per_million"].idxmin()] if len(ok) else None
        rows.append({"sku": sku, "workload": w, "batch": int(b),
                     "γ=0 replicas": base["replicas"], "γ=0 USD/M": base["usd_per_million"],
                     "cheapest γ": int(best["gamma"]) if best is not None else None,
                     "replicas": best["replicas"] if best is not None else np.nan,
                     "USD/M": best["usd_per_million"] if best is not None else np.nan,
                     "saving %": (100 * (1 - best["usd_per_million"] / base["usd_per_million"])
                                  if best is not None and base["meets_slo"] else np.nan)})
    out = pd.DataFrame(rows)
    for column in ("γ=0 replicas", "cheapest γ", "replicas"):
        out[column] = out[column].astype("Int64")   # whole numbers; <NA> where none qualifies
    return out


def draft_costs(root=DEFAULT_ROOT, price_per_replica_hour: float = PRICE_PER_REPLICA_HOUR,
                itl_slo_ms: float = ITL_SLO_MS,
                demand_tokens_per_s: float = DEMAND_TOKENS_PER_S) -> pd.DataFrame:
    """Per vLLM draft sweep, depth, workload and batch: the target alone (its paired γ=0 arm) priced
    as :func:`priced` prices a sweep's cells, beside the cheapest drafted γ; ``change_pct`` is
    the draft's cost per million tokens over the target alone's, SLO aside (negative: the draft
    cuts cost), and each side's SLO verdict."""
    runs = [r for r in load_runs(root, kind="draft-sweep")   # vLLM's: what a server runs
            if r.manifest["grid"].get("draft_depth") is not None and engine_of(r) == "vllm"]
    price = priced(price_per_replica_hour, itl_slo_ms, demand_tokens_per_s, root, runs)
    if price.empty:
        return pd.DataFrame()
    depth = {r.run_id: int(r.manifest["grid"]["draft_depth"]) for r in runs}
    rows = []
    for (run_id, w, b), g in price.groupby(["run_id", "workload", "batch"], sort=False):
        off, drafted = g[g["gamma"] == 0], g[g["gamma"] > 0]
        if off.empty or drafted.empty:
            continue
        off, best = off.iloc[0], drafted.loc[drafted["usd_per_million_any"].idxmin()]
        rows.append({"run_id": run_id, "sku": off["sku"], "depth": depth[run_id],
                     "workload": w, "batch": int(b), "gamma": int(best["gamma"]),
                     "off_usd": off["usd_per_million_any"],
                     "draft_usd": best["usd_per_million_any"],
                     "change_pct": percent_change(best["usd_per_million_any"],
                                                  off["usd_per_million_any"]),
                     "off_meets_slo": bool(off["meets_slo"]),
                     "draft_meets_slo": bool(drafted["meets_slo"].any())})
    return pd.DataFrame(rows)


def kv_bytes_per_token(shape: ModelShape) -> float:
    """Keys and values of every layer for one token: 2 · layers · kv_heads · head_dim · bytes."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * shape.act_bytes


def _weight_bytes(shape: ModelShape) -> float:
    return shape.weight_elements() * shape.weight_bytes


def hypothetical_draft_kv(run: Run, draft_layer_fraction: float = 0.25) -> dict:
    """HYPOTHETICAL: the KV-cache capacity a draft *model* would cost this run's engine.

    n-gram drafting has no draft model and no draft KV cache, so the measured configuration
    loses nothing. The hypothetical draft is the target's own architecture with
    ``draft_layer_fraction`` of its layers (an assumption, not a measured or published model);
    its weights and its per-token KV come out of the engine's KV pool (the manifest's
    ``cpu_kvcache_gib``), as in the worksheet's worked example.
    """
    target = ModelShape(**run.manifest["model_shape"])
    pool = float(run.manifest["engine"]["settings"]["cpu_kvcache_gib"]) * 2**30
    draft = ModelShape(**{**run.manifest["model_shape"], "name": "hypothetical draft",
                          "layers": max(1, round(target.layers * draft_layer_fraction))})
    per_token, draft_per_token = kv_bytes_per_token(target), kv_bytes_per_token(draft)
    without = economics.kv_capacity_tokens(pool, per_token)
    with_draft = economics.kv_capacity_tokens(max(pool - _weight_bytes(draft), 0),
                                              per_token + draft_per_token)
    return {"run_id": run.run_id, "sku": run.sku, "pool_bytes": pool,
            "target_kv_bytes_per_token": per_token, "draft_layers": draft.layers,
            "draft_weight_bytes": _weight_bytes(draft), "draft_kv_bytes_per_token": draft_per_token,
            "tokens_without_draft": without, "tokens_with_draft": with_draft,
            "capacity_loss_pct": 100 * (1 - with_draft / without)}
