"""The planning chapter's numbers, words and tables: recommendations, break-even, priced
decisions, negative cells and KV capacity, from the latest sweep of every SKU."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from specbench.report.chapters.base import Numbers
from specbench.report.plan import (
    regret_summary,
    regret_table,
    input_table,
    NEAR_BEST_PCT,
    break_even_table,
    hypothetical_draft_kv,
    latest_sweeps,
    negative_cells,
    ok_cells,
    plan_from_runs,
    priced,
    priced_decisions,
    rep_intervals,
    speedup_interval,
)
from specbench.report.transfer import leave_one_sku_out
from specbench.store.runs import DEFAULT_ROOT, load_runs
from specbench.theory.economics import speedup_grid  # noqa: F401  (the chapter's table)

__all__ = ["recommendation_summary", "numbers"]




# -- the planning chapter ------------------------------------------------------------------

def _quoted(names) -> str:
    names = [f"'{n}'" for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _cases(frame: pd.DataFrame, gamma: bool = False) -> str:
    return "; ".join(f"{r.sku} '{r.workload}' batch {r.batch}"
                     + (f" γ={r.gamma}" if gamma else "") for r in frame.itertuples())


def _near_best(plans: pd.DataFrame, miss: pd.DataFrame) -> int:
    """How many misses lose less than NEAR_BEST_PCT of the fastest measured speedup."""
    near = 0
    for r in miss.itertuples():
        g = plans[(plans["sku"] == r.sku) & (plans["workload"] == r.workload)
                  & (plans["batch"] == r.batch)].set_index("gamma")["measured_speedup"]
        if g[r.recommended] >= g[r.measured_best] * (1 - NEAR_BEST_PCT / 100):
            near += 1
    return near


def _recommendation_phrases(recs: pd.DataFrame, plans: pd.DataFrame) -> dict:
    """Wording chosen from the data: which workloads the tool turns off/on everywhere."""
    by_w = recs.groupby("workload")["recommended"]
    off = sorted(w for w, g in by_w if (g == 0).all())
    on = sorted(w for w, g in by_w if (g > 0).all())
    mixed = sorted(set(recs["workload"]) - set(off) - set(on))
    parts = []
    if off:
        parts.append(f"turns speculation off for {_quoted(off)} on every SKU and batch")
    if on:
        parts.append(f"turns it on for {_quoted(on)} on every SKU and batch")
    if mixed:
        parts.append(f"switches it by SKU or batch for {_quoted(mixed)}")
    agree = recs["recommended"] == recs["measured_best"]
    miss = recs[~agree]
    return {
        "rec_phrase": "The tool " + ", and ".join(parts),
        "agree_phrase": ("picks the fastest measured γ in every case" if agree.all() else
                         f"picks the fastest measured γ in {int(agree.sum())} of {len(recs)} "
                         f"cases; it misses on {_cases(miss)}, and in "
                         f"{_near_best(plans, miss)} of these {len(miss)} misses the measured "
                         f"speedup at the recommended γ is within {NEAR_BEST_PCT:g} percent "
                         "of the fastest"),
        "miss_batches": sorted(set(int(b) for b in miss["batch"])),
    }


def _range(values, fmt: str) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return format(lo, fmt) if math.isclose(lo, hi, abs_tol=5e-4) else \
        f"{format(lo, fmt)} to {format(hi, fmt)}"


def _margin_phrase(spec: pd.DataFrame) -> str:
    """Per batch: the marginal value of one more token where the tool turns speculation on,
    and where it keeps it off."""
    parts = []
    for b, g in spec.groupby("batch"):
        on, off = g[g["recommended"] > 0], g[g["recommended"] == 0]
        bits = []
        if len(on):
            bits.append(f"{_range(on['marginal_speedup'], '+.3f')}× where the tool turns "
                        "speculation on")
        if len(off):
            bits.append(f"{_range(off['marginal_speedup'], '+.3f')}× where it keeps it off")
        parts.append(f"at batch {b} it is " + " and ".join(bits))
    return ("; ".join(parts)).capitalize()


def _miss_phrase(plans: pd.DataFrame) -> str:
    """Where the tool turns speculation on but at another γ than the fastest measured one:
    the model's prediction and d(γ) at the fastest measured γ, with wording chosen by sign."""
    rows = []
    for _, g in plans.groupby(["sku", "workload", "batch"], sort=False):
        rec, best = int(g["recommended"].iloc[0]), int(g["measured_best"].iloc[0])
        if rec > 0 and best > 0 and rec != best:
            rows.append(g[g["gamma"] == best].iloc[0])
    if not rows:
        return ("Wherever the tool turns speculation on, it picks the fastest measured γ.")
    miss = pd.DataFrame(rows)
    under = (miss["pred_speedup"] < miss["measured_speedup"]).all()
    text = (f"Where it turns speculation on at another γ than the fastest measured one "
            f"({_cases(miss)}), it predicts {_range(miss['pred_speedup'], '.2f')}× at that "
            f"fastest γ against a measured {_range(miss['measured_speedup'], '.2f')}×, with the "
            f"model's d(γ) there at {_range(miss['d'], '.2f')}")
    if under:
        text += (": the model prices verification above what the measurement shows, so that "
                 "miss is the model's d(γ), not the data's.")
    else:
        text += "."
    return text


def _v_phrase(be: pd.DataFrame) -> str:
    return "; ".join(f"at batch {b}, v is {_range(g['v'], '.3f')} and the break-even "
                     f"per-position α {_range(g['break_even_alpha'], '.2f')}"
                     for b, g in be.groupby("batch"))


def _negative_phrase(neg: pd.DataFrame, paid_at_zero: pd.DataFrame) -> str:
    if neg.empty:
        return "Every speculative cell paid, beyond the spread of its repetitions."
    within = int((neg["verdict"] == "within noise").sum())
    text = (f"Of these, {int((neg['verdict'] == 'did not pay').sum())} did not pay (the whole "
            f"interval below 1) and {within} {'is' if within == 1 else 'are'} within noise "
            "(the interval contains 1).")
    loaded = int(neg["taken under load"].sum())
    if loaded:
        text += (f" {loaded} of the {len(neg)} were taken while other processes loaded the "
                 "CPU (flagged by their run), so their timing is suspect.")
    if len(paid_at_zero):
        one = len(paid_at_zero) == 1
        text += (f" {len(paid_at_zero)} {'cell' if one else 'cells'} with zero acceptance "
                 f"{'shows' if one else 'show'} a speedup whose whole interval lies above 1 "
                 f"({_cases(paid_at_zero, gamma=True)}, run {paid_at_zero['run_id'].iloc[0]}"
                 f"{'' if one else ' …'}): speculation cannot have "
                 "saved a step there, so that gap is drift between the engines of the two "
                 "arms, larger than the spread of the repetitions within each.")
    return text


def _priced_phrase(decisions: pd.DataFrame) -> str:
    cheaper = decisions[(decisions["saving %"] > 0)]
    rescued = decisions[decisions["γ=0 USD/M"].isna() & decisions["cheapest γ"].notna()
                        & (decisions["cheapest γ"].fillna(0) > 0)]
    none = decisions[decisions["cheapest γ"].isna()]
    base_best = decisions[decisions["cheapest γ"] == 0]
    parts = [f"speculation lowers the cost below a qualifying γ=0 in {len(cheaper)} of "
             f"{len(decisions)} SKU × workload × batch cases"]
    if len(rescued):
        parts.append(f"in {len(rescued)} more γ=0 misses the SLO and only speculation meets "
                     f"it ({_cases(rescued)})")
    if len(base_best):
        parts.append(f"γ=0 is cheapest in {len(base_best)}")
    if len(none):
        parts.append(f"no γ meets the SLO in {len(none)} ({_cases(none)})")
    return "At these assumptions " + "; ".join(parts) + "."


def recommendation_summary(plans: pd.DataFrame) -> pd.DataFrame:
    """One row per SKU × workload × batch: the recommended γ with predicted and measured
    speedup side by side, and the fastest measured γ."""
    rows = []
    for (sku, w, b), g in plans.groupby(["sku", "workload", "batch"], sort=False):
        g = g.set_index("gamma")
        rec, best = int(g["recommended"].iloc[0]), int(g["measured_best"].iloc[0])
        rows.append({"sku": sku, "workload": w, "batch": b, "recommended γ": rec,
                     "predicted ×": g.loc[rec, "pred_speedup"],
                     "measured × at it": g.loc[rec, "measured_speedup"],
                     "fastest measured γ": best,
                     "measured × there": g.loc[best, "measured_speedup"],
                     "+1 token Δ× at it": g.loc[rec, "marginal_speedup"]})
    return pd.DataFrame(rows).set_index(["sku", "workload", "batch"])


def _aggregate_phrase(be: pd.DataFrame) -> str:
    # A workload with partial acceptance shows the aggregate fraction drifting with γ while
    # the per-position α does not; with none in the store, say so.
    mid = be[(be["alpha_per_position"] > 0) & (be["alpha_per_position"] < 1)]
    if mid.empty:
        return ("No measured workload has a per-position α strictly between 0 and 1, so the "
                "two acceptance measures coincide on these runs.")
    first = mid.iloc[0]
    same = mid[(mid["sku"] == first["sku"]) & (mid["batch"] == first["batch"])
               & (mid["workload"] == first["workload"])].sort_values("gamma")
    r = ", ".join(f"{x:.3f}" for x in same["aggregate_r"])
    a = ", ".join(f"{x:.3f}" for x in same["alpha_per_position"])
    g = ", ".join(str(x) for x in same["gamma"])
    return (f"On {first['sku']} '{first['workload']}' at batch {first['batch']} (γ = {g}) the "
            f"aggregate accepted/proposed fraction is {r}, while the per-position α is {a}: "
            "the aggregate counts every proposed position, including those after a rejection "
            "that could never be accepted, so it is not the formula's α.")


def _serving_phrase(root) -> str:
    serving = load_runs(root, kind="serving")
    if not serving:
        return ("No serving run is in the store, so the throughput is the sweep's decode "
                "throughput of one engine at a fixed batch, not a served request rate.")
    return (f"{len(serving)} serving run(s) are in the store "
            f"({', '.join(r.run_id for r in serving)}); this chapter prices the sweep's decode "
            "throughput, which the serving runs do not replace.")


def numbers(root=DEFAULT_ROOT, price_per_replica_hour: float = 1.0,
            itl_slo_ms: float = 40.0, demand_tokens_per_s: float = 500.0) -> Numbers:
    """The planning chapter's named numbers, computed wording and tables, with the run ids.

    The price, SLO and demand are the chapter's stated assumptions, not measurements.
    """
    runs = latest_sweeps(root)
    first = runs[0]
    from specbench.report.analysis import sweep_cells
    headline = sweep_cells(root)
    plans = pd.concat([plan_from_runs(r.sku, root, headline_cells=headline) for r in runs],
                      ignore_index=True)
    recs = plans.drop_duplicates(["sku", "workload", "batch"]).copy()
    at_rec = plans[plans["gamma"] == plans["recommended"]]
    on = at_rec[at_rec["gamma"] > 0]
    spec = plans[plans["gamma"] > 0]
    be = break_even_table(root, headline)
    neg = negative_cells(root)
    price = priced(price_per_replica_hour, itl_slo_ms, demand_tokens_per_s, root)
    decisions = priced_decisions(price)
    # The KV pool is a CPU engine setting; a GPU run's manifest records none.
    kv = hypothetical_draft_kv(next((r for r in runs if "cpu_kvcache_gib" in
                                     r.manifest["engine"]["settings"]), first))
    all_sweeps = load_runs(root, kind="sweep")
    zero = []
    for run in all_sweeps:
        iv = rep_intervals(run)
        for _, c in ok_cells(run).query("gamma > 0 and alpha == 0").iterrows():
            interval = speedup_interval(iv, c["workload"], int(c["gamma"]), int(c["batch"]))
            if interval is not None and interval[0] > 1:
                zero.append({"sku": run.sku, "workload": c["workload"],
                             "batch": int(c["batch"]), "gamma": int(c["gamma"]),
                             "run_id": run.run_id})
    paid_at_zero = pd.DataFrame(zero, columns=["sku", "workload", "batch", "gamma", "run_id"])
    consistent = (be["side"] == "above") == (be["measured_speedup"] > 1)
    numbers = {
        "run_ids": ", ".join(r.run_id for r in runs),
        "all_run_ids": ", ".join(r.run_id for r in all_sweeps),
        "n_runs_all": len(all_sweeps),
        "first_sku": first.sku,
        "draft_methods": ", ".join(sorted({r.manifest["engine"].get("speculative_method", "?")
                                           for r in runs})),
        "n_plans": int(len(recs)),
        "n_agree": int((recs["recommended"] == recs["measured_best"]).sum()),
        "n_exact_divisor": int((spec["divisor_source"] == "counters").sum()),
        "n_spec_rows": int(len(spec)),
        "rec_gap_max_pct": float((100 * (on["pred_speedup"] / on["measured_speedup"] - 1))
                                 .abs().max()) if len(on) else float("nan"),
        "margin_phrase": _margin_phrase(spec),
        "miss_phrase": _miss_phrase(plans),
        "v_phrase": _v_phrase(be),
        "n_above": int((be["side"] == "above").sum()),
        "n_below": int((be["side"] == "below").sum()),
        "n_be_rows": int(len(be)),
        "n_consistent": int(consistent.sum()),
        "inconsistent_phrase": ("" if consistent.all() else
                                " The exceptions: " + _cases(be[~consistent], gamma=True) + "."),
        "n_negative": int(len(neg)),
        "n_did_not_pay": int((neg["verdict"] == "did not pay").sum()),
        "n_within_noise": int((neg["verdict"] == "within noise").sum()),
        "n_spec_cells_all_runs": int(sum((ok_cells(r)["gamma"] > 0).sum() for r in all_sweeps)),
        "negative_phrase": _negative_phrase(neg, paid_at_zero),
        "price_per_replica_hour": float(price_per_replica_hour), "itl_slo_ms": float(itl_slo_ms),
        "demand_tokens_per_s": float(demand_tokens_per_s),
        "priced_phrase": _priced_phrase(decisions),
        "kv_sku": kv["sku"], "kv_pool_gib": kv["pool_bytes"] / 2**30,
        "kv_tokens_without": int(kv["tokens_without_draft"]),
        "kv_tokens_with": int(kv["tokens_with_draft"]),
        "kv_loss_pct": float(kv["capacity_loss_pct"]), "kv_draft_layers": int(kv["draft_layers"]),
        "kv_target_layers": int(first.manifest["model_shape"]["layers"]),
        "kv_target_bytes_per_token": int(kv["target_kv_bytes_per_token"]),
        "kv_draft_weight_mib": kv["draft_weight_bytes"] / 2**20,
    }
    numbers.update(_recommendation_phrases(recs, plans))
    numbers["miss_batches"] = ", ".join(map(str, numbers["miss_batches"])) or "none"
    numbers.update(aggregate_phrase=_aggregate_phrase(be), serving_phrase=_serving_phrase(root))
    # leave_one_sku_out keeps greedy cells only; computed once for the numbers and the table.
    from specbench.report.analysis import request_predictors
    loso = leave_one_sku_out(headline, request_predictors(root, headline))
    regrets = regret_table(loso) if len(loso) else pd.DataFrame()
    numbers.update(_regret_numbers(regrets))
    tables = {"plans": plans.drop(columns=["sources"]), "inputs": input_table(plans),
              "regret": regrets, "regret_summary": regret_summary(regrets) if len(regrets)
              else pd.DataFrame(),
              "recommendations": recommendation_summary(plans),
              "break_even": be, "negative": neg, "priced": price,
              "decisions": decisions, "kv": kv, "paid_at_zero": paid_at_zero}
    return Numbers(values=numbers, runs=[r.run_id for r in runs], tables=tables)


def _regret_numbers(r: pd.DataFrame) -> dict:
    """The planner's regret on held-out SKUs against its rivals, and where it was wrong."""
    if r.empty:
        return {"regret_groups": 0, "regret_planner_median": float("nan"),
                "regret_planner_worst": float("nan"), "regret_best_rival": "—",
                "regret_best_rival_median": float("nan"), "regret_wrong": "none",
                "regret_goal": "not judged (one SKU: nothing to hold out)"}
    s = regret_summary(r).set_index("rule")
    rivals = s.drop(index="planner")
    best_rival = rivals["median regret %"].idxmin()
    wrong = r[r["planner: regret %"] > 0].sort_values("planner: regret %", ascending=False)
    median = float(s.loc["planner", "median regret %"])
    beats = bool((median < rivals["median regret %"]).all())
    return {"regret_groups": int(len(r)), "regret_planner_median": median,
            "regret_planner_worst": float(s.loc["planner", "worst regret %"]),
            "regret_best_rival": best_rival,
            "regret_best_rival_median": float(rivals.loc[best_rival, "median regret %"]),
            "regret_wrong": ", ".join(
                f"'{row['workload']}' batch {row['batch']} on {row['sku']} (chose "
                f"γ={int(row['planner: γ'])}, best γ={int(row['best γ'])}, "
                f"+{row['planner: regret %']:.1f} %: the model erred by "
                f"{row['planner: error at its γ %']:+.1f} % at its γ and "
                f"{row['planner: error at best γ %']:+.1f} % at the best)"
                for _, row in wrong.head(5).iterrows()) or "none",
            "regret_wrong_n": int(len(wrong)),
            "regret_goal": ("met" if median <= REGRET_GOAL_PCT and beats else "missed")}


#: The planner's goal on held-out SKUs: median regret at most this, and below every rival's.
REGRET_GOAL_PCT = 2.0
