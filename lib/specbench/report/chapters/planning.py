"""The planning chapter's numbers, words and tables: recommendations, break-even, priced
decisions, negative cells and KV capacity, from the latest sweep of every SKU."""
from __future__ import annotations

import pandas as pd

from specbench.report.numbers import Numbers
from specbench.report.wording import and_list, span
from specbench.report.plan import (
    DEMAND_TOKENS_PER_S,
    ITL_SLO_MS,
    NEAR_BEST_PCT,
    PRICE_PER_REPLICA_HOUR,
    break_even_table,
    hypothetical_draft_kv,
    input_table,
    latest_sweeps,
    negative_cells,
    ok_cells,
    plan_from_runs,
    priced,
    priced_decisions,
    regret_summary,
    regret_table,
    rep_intervals,
    speedup_interval,
)
from specbench.derive.drafts import draft_memory
from specbench.derive.transfer import leave_one_sku_out
from specbench.store.runs import DEFAULT_ROOT, load_runs
from specbench.theory.economics import speedup_grid  # noqa: F401  (the chapter's table)
from specbench.theory.errors import percent_error

__all__ = [
    "break_even_by_batch",
    "break_even_exceptions",
    "negative_by_workload",
    "numbers",
    "priced_by_sku",
    "recommendation_cases",
    "recommendation_summary",
    "recommendations_by_workload",
    "speedup_grid_in_page",
]




# -- the planning chapter ------------------------------------------------------------------
#
# The prose quotes counts, medians and at most the one or two cases that matter; every case is
# in a table (in the page when it has a row per workload or SKU, folded when it has one per
# cell), so the text does not grow with the store.

def _case(labels: dict, row, gamma: bool = False) -> str:
    """One case as a reader reads it: "Zen 4 · fp32 · 1 thread, 'repeat' at batch 4"."""
    return (f"{labels.get(row['sku'], row['sku'])}, '{row['workload']}' at batch "
            f"{int(row['batch'])}" + (f", γ={int(row['gamma'])}" if gamma else ""))


def _labelled(frame: pd.DataFrame, labels: dict) -> pd.DataFrame:
    """``frame`` with its SKU ids replaced by their readable labels, in a column "SKU"."""
    out = frame.copy()
    out.insert(0, "SKU", out.pop("sku").map(lambda s: labels.get(s, s)))
    return out


def _most_common(values: pd.Series) -> tuple[str, int]:
    """The most frequent value and how often it occurs ("—", 0 for none)."""
    if values.empty:
        return "—", 0
    counts = values.value_counts()
    return str(counts.index[0]), int(counts.iloc[0])


def recommendation_cases(plans: pd.DataFrame) -> pd.DataFrame:
    """Per SKU × workload × batch: the recommendation beside the fastest measured γ, and the
    share of the fastest measured speedup the recommendation gives up (0 where it agrees)."""
    cases = recommendation_summary(plans).reset_index()
    cases["loss %"] = 100 * (1 - cases["measured × at it"] / cases["measured × there"])
    return cases


def _recommendation_numbers(cases: pd.DataFrame, labels: dict) -> dict:
    agree = cases["recommended γ"] == cases["fastest measured γ"]
    miss = cases[~agree]
    on = cases["recommended γ"] > 0
    by_w = cases.groupby("workload")["recommended γ"]
    worst = miss.loc[miss["loss %"].idxmax()] if len(miss) else None
    off_top, off_top_n = _most_common(cases.loc[~on, "workload"])
    return {
        "n_plans": len(cases), "n_agree": int(agree.sum()), "n_miss": len(miss),
        "n_rec_on": int(on.sum()),
        "n_workloads": int(by_w.ngroups),
        "n_workloads_on": int(sum((g > 0).all() for _, g in by_w)),
        "n_rec_off": int((~on).sum()),
        "rec_off_top_workload": off_top, "rec_off_top_n": off_top_n,
        "near_best_pct": float(NEAR_BEST_PCT),
        "n_near_best": int((miss["loss %"] <= NEAR_BEST_PCT).sum()),
        "miss_loss_median_pct": float(miss["loss %"].median()) if len(miss) else 0.0,
        "miss_loss_worst_pct": float(miss["loss %"].max()) if len(miss) else 0.0,
        "miss_worst_case": _case(labels, worst) if worst is not None else "none",
    }


def recommendations_by_workload(cases: pd.DataFrame) -> pd.DataFrame:
    """Per workload: how often the tool speculates, how often it picks the fastest measured γ,
    and the most a pick gives up."""
    rows = []
    for w, g in cases.groupby("workload", sort=False):
        rows.append({"workload": w, "cases": len(g),
                     "speculation on": int((g["recommended γ"] > 0).sum()),
                     "fastest γ picked": int((g["recommended γ"] == g["fastest measured γ"]).sum()),
                     "median measured × at the pick": float(g["measured × at it"].median()),
                     "worst loss %": float(g["loss %"].max())})
    return pd.DataFrame(rows)


def _margin_numbers(spec: pd.DataFrame) -> dict:
    """The marginal value of one more token, where the tool turns speculation on and where it
    keeps it off."""
    on = spec.loc[spec["recommended"] > 0, "marginal_speedup"].dropna()
    off = spec.loc[spec["recommended"] == 0, "marginal_speedup"].dropna()
    nan = float("nan")
    return {"margin_on_median": float(on.median()) if len(on) else nan,
            "margin_on_min": float(on.min()) if len(on) else nan,
            "margin_on_max": float(on.max()) if len(on) else nan,
            "margin_off_max": float(off.max()) if len(off) else nan}


def _other_gamma_numbers(plans: pd.DataFrame) -> dict:
    """Where the tool turns speculation on at another γ than the fastest measured one: how
    often the model under-predicts the speedup at that fastest γ (its d(γ) is too high there)."""
    rows = []
    for _, g in plans.groupby(["sku", "workload", "batch"], sort=False):
        rec, best = int(g["recommended"].iloc[0]), int(g["measured_best"].iloc[0])
        if rec > 0 and best > 0 and rec != best:
            rows.append(g[g["gamma"] == best].iloc[0])
    miss = pd.DataFrame(rows)
    under = int((miss["pred_speedup"] < miss["measured_speedup"]).sum()) if len(miss) else 0
    return {"n_other_gamma": len(miss), "n_other_gamma_under": under}


def break_even_by_batch(be: pd.DataFrame) -> pd.DataFrame:
    """Per batch: the range of v and of the break-even α, and how many cells the side of the
    line places correctly (above and faster than γ=0, or below and not)."""
    consistent = (be["side"] == "above") == (be["measured_speedup"] > 1)
    rows = []
    for b, g in be.groupby("batch"):
        rows.append({"batch": int(b), "cells": len(g), "v, least": float(g["v"].min()),
                     "v, most": float(g["v"].max()),
                     "break-even α, most": float(g["break_even_alpha"].max()),
                     "above the line": int((g["side"] == "above").sum()),
                     "side agrees with speedup": int(consistent[g.index].sum())})
    return pd.DataFrame(rows)


def break_even_exceptions(be: pd.DataFrame, labels: dict) -> pd.DataFrame:
    """The cells whose side of the break-even line disagrees with their measured speedup."""
    consistent = (be["side"] == "above") == (be["measured_speedup"] > 1)
    out = be.loc[~consistent, ["sku", "workload", "batch", "gamma", "alpha_per_position",
                               "break_even_alpha", "measured_speedup"]]
    return _labelled(out, labels).rename(columns={
        "gamma": "γ", "alpha_per_position": "per-position α",
        "break_even_alpha": "break-even α", "measured_speedup": "measured ×"})


def _break_even_numbers(be: pd.DataFrame) -> dict:
    consistent = (be["side"] == "above") == (be["measured_speedup"] > 1)
    top, top_n = _most_common(be.loc[~consistent, "workload"])
    return {"n_above": int((be["side"] == "above").sum()),
            "n_below": int((be["side"] == "below").sum()),
            "n_be_rows": len(be), "n_consistent": int(consistent.sum()),
            "n_inconsistent": int((~consistent).sum()),
            "inconsistent_top_workload": top, "inconsistent_top_n": top_n,
            "v_max": float(be["v"].max()), "be_alpha_max": float(be["break_even_alpha"].max())}


def negative_by_workload(neg: pd.DataFrame) -> pd.DataFrame:
    """Per workload: the speculative cells that did not pay, within noise, and taken under load."""
    rows = [{"workload": w, "cells": len(g),
             "did not pay": int((g["verdict"] == "did not pay").sum()),
             "within noise": int((g["verdict"] == "within noise").sum()),
             "taken under load": int(g["taken under load"].sum())}
            for w, g in neg.groupby("workload")]
    return pd.DataFrame(rows, columns=["workload", "cells", "did not pay", "within noise",
                                       "taken under load"]).sort_values(
        "cells", ascending=False, kind="stable")


def _negative_numbers(neg: pd.DataFrame, paid_at_zero: pd.DataFrame) -> dict:
    top, top_n = _most_common(neg["workload"])
    return {"n_negative": len(neg),
            "n_did_not_pay": int((neg["verdict"] == "did not pay").sum()),
            "n_within_noise": int((neg["verdict"] == "within noise").sum()),
            "n_negative_loaded": int(neg["taken under load"].sum()) if len(neg) else 0,
            "negative_top_workload": top, "negative_top_n": top_n,
            "n_paid_at_zero": len(paid_at_zero)}


def priced_by_sku(decisions: pd.DataFrame, labels: dict) -> pd.DataFrame:
    """Per SKU: in how many workload × batch cases speculation is cheaper than a qualifying
    γ=0, is the only way to meet the SLO, loses to γ=0, or no γ meets the SLO."""
    kinds = _priced_kinds(decisions)
    rows = []
    for sku, g in decisions.groupby("sku", sort=False):
        k = kinds.loc[g.index]
        saving = g.loc[k == "cheaper", "saving %"]
        rows.append({"SKU": labels.get(sku, sku), "cases": len(g),
                     "γ>0 cheaper": int((k == "cheaper").sum()),
                     "only γ>0 meets SLO": int((k == "rescued").sum()),
                     "γ=0 cheapest": int((k == "base").sum()),
                     "no γ meets SLO": int((k == "none").sum()),
                     "median saving %": float(saving.median()) if len(saving) else float("nan")})
    return pd.DataFrame(rows)


def _priced_kinds(decisions: pd.DataFrame) -> pd.Series:
    """Each decision's kind: 'cheaper' (speculation below a qualifying γ=0), 'rescued' (γ=0
    misses the SLO, a γ > 0 meets it), 'base' (γ=0 cheapest), 'none' (no γ meets it), or
    'tie' (speculation qualifies at γ=0's cost)."""
    cheapest = decisions["cheapest γ"]
    kind = pd.Series("tie", index=decisions.index)
    kind[decisions["saving %"] > 0] = "cheaper"
    kind[decisions["γ=0 USD/M"].isna() & cheapest.notna() & (cheapest.fillna(0) > 0)] = "rescued"
    kind[cheapest.notna() & (cheapest.fillna(-1) == 0)] = "base"
    kind[cheapest.isna()] = "none"
    return kind


def _priced_numbers(decisions: pd.DataFrame) -> dict:
    kinds = _priced_kinds(decisions)
    return {"n_decisions": len(decisions), "n_cheaper": int((kinds == "cheaper").sum()),
            "n_rescued": int((kinds == "rescued").sum()),
            "n_base_best": int((kinds == "base").sum()), "n_no_slo": int((kinds == "none").sum()),
            "saving_median_pct": float(decisions.loc[kinds == "cheaper", "saving %"].median())
            if (kinds == "cheaper").any() else 0.0}


def _aggregate_phrase(be: pd.DataFrame, labels: dict) -> str:
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
    return (f"On {_case(labels, first)} (γ = {g}), the aggregate accepted/proposed fraction is "
            f"{r}, while the per-position α is {a}. The aggregate counts every proposed "
            "position, including those after a rejection that could never be accepted, so it "
            "is not the formula's α.")


def speedup_grid_in_page(grid: pd.DataFrame) -> pd.DataFrame:
    """The worksheet's grid narrowed to seven columns for the page: α, four of its k and the
    two stress columns (the whole grid is folded beside it)."""
    frame = grid.reset_index()
    keep = [c for c in frame.columns if c in ("α", "k=1", "k=2", "k=4", "k=7")
            or c.startswith("k=4,")]
    return frame[keep]


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


def numbers(root=DEFAULT_ROOT, price_per_replica_hour: float = PRICE_PER_REPLICA_HOUR,
            itl_slo_ms: float = ITL_SLO_MS,
            demand_tokens_per_s: float = DEMAND_TOKENS_PER_S) -> Numbers:
    """The planning chapter's named numbers, computed wording and tables, with the run ids.

    The price, SLO and demand are the chapter's stated assumptions, not measurements.
    """
    runs = latest_sweeps(root)
    first = runs[0]
    from specbench.derive.analysis import sweep_cells
    headline = sweep_cells(root)
    labels = dict(zip(headline["sku"], headline["sku_label"], strict=True))
    sessions = sweep_cells(root, every_session=True)   # each plan on its own host session
    plans = pd.concat([plan_from_runs(r.sku, root, headline_cells=sessions) for r in runs],
                      ignore_index=True)
    cases = recommendation_cases(plans)
    at_rec = plans[plans["gamma"] == plans["recommended"]]
    on = at_rec[at_rec["gamma"] > 0]
    gap = percent_error(on["pred_speedup"], on["measured_speedup"]).abs()
    spec = plans[plans["gamma"] > 0]
    be = break_even_table(root, headline)
    neg = negative_cells(root)
    price = priced(price_per_replica_hour, itl_slo_ms, demand_tokens_per_s, root)
    decisions = priced_decisions(price)
    # The KV pool is a CPU engine setting; a GPU run's manifest records none.
    kv = hypothetical_draft_kv(next((r for r in runs if "cpu_kvcache_gib" in
                                     r.manifest["engine"]["settings"]), first))
    all_sweeps = load_runs(root, kind="sweep")
    paid_at_zero = _paid_at_zero(all_sweeps)
    numbers = {
        "run_ids": ", ".join(r.run_id for r in runs),
        "all_run_ids": ", ".join(r.run_id for r in all_sweeps),
        "n_runs_all": len(all_sweeps), "n_skus": len(runs),
        "first_sku": first.sku,
        "draft_methods": ", ".join(sorted({r.manifest["engine"].get("speculative_method", "?")
                                           for r in runs})),
        "n_exact_divisor": int((spec["divisor_source"] == "counters").sum()),
        "n_spec_rows": len(spec),
        "rec_gap_median_pct": float(gap.median()) if len(on) else float("nan"),
        "rec_gap_max_pct": float(gap.max()) if len(on) else float("nan"),
        "n_spec_cells_all_runs": int(sum((ok_cells(r)["gamma"] > 0).sum() for r in all_sweeps)),
        "price_per_replica_hour": float(price_per_replica_hour), "itl_slo_ms": float(itl_slo_ms),
        "demand_tokens_per_s": float(demand_tokens_per_s),
        **_kv_numbers(kv, labels, first),
        "kv_measured": _measured_draft_kv(root),
        "aggregate_phrase": _aggregate_phrase(be, labels),
    }
    for part in (_recommendation_numbers(cases, labels), _margin_numbers(spec),
                 _other_gamma_numbers(plans), _break_even_numbers(be),
                 _negative_numbers(neg, paid_at_zero), _priced_numbers(decisions)):
        numbers.update(part)
    # leave_one_sku_out keeps greedy cells only; computed once for the numbers and the table.
    from specbench.derive.analysis import request_predictors
    loso = leave_one_sku_out(headline, request_predictors(root, headline))
    regrets = regret_table(loso) if len(loso) else pd.DataFrame()
    numbers.update(_regret_numbers(regrets, labels))
    tables = _tables(plans, cases, regrets, be, neg, price, decisions, kv, paid_at_zero, labels)
    return Numbers(values=numbers, runs=[r.run_id for r in runs], tables=tables)


def _kv_numbers(kv: dict, labels: dict, first) -> dict:
    """The hypothetical draft model's KV cache against the target's, on one SKU's pool."""
    return {"kv_sku": labels.get(kv["sku"], kv["sku"]), "kv_pool_gib": kv["pool_bytes"] / 2**30,
            "kv_tokens_without": int(kv["tokens_without_draft"]),
            "kv_tokens_with": int(kv["tokens_with_draft"]),
            "kv_loss_pct": float(kv["capacity_loss_pct"]),
            "kv_draft_layers": int(kv["draft_layers"]),
            "kv_target_layers": int(first.manifest["model_shape"]["layers"]),
            "kv_target_bytes_per_token": int(kv["target_kv_bytes_per_token"]),
            "kv_draft_weight_mib": kv["draft_weight_bytes"] / 2**20}


def _measured_draft_kv(root) -> str:
    """What the served draft models' layers took, beside the hypothetical (the draft chapter
    reads the same table)."""
    memory = draft_memory(root)
    if memory.empty:
        return "no draft model was served yet to measure it (`make serving-drafts`)"
    depths = sorted(set(memory["depth"]))
    who = (f"a served draft of depth {depths[0]}" if len(depths) == 1 else
           f"served drafts of depth {and_list([str(d) for d in depths])}")
    return (f"{who} took {span(100 * memory['kv_capacity_lost'], 1)} % of the capacity its "
            "engine reported, " + ("its share of the layers" if memory["as_layer_share"].all()
                                   else "not its share of the layers"))


def _tables(plans, cases, regrets, be, neg, price, decisions, kv, paid_at_zero,
            labels) -> dict:
    """The tables the chapter shows (never glued)."""
    return {"plans": plans.drop(columns=["sources"]), "inputs": input_table(plans),
            "regret": regrets, "regret_summary": regret_summary(regrets) if len(regrets)
            else pd.DataFrame(), "regret_wrong": _regret_wrong(regrets, labels),
            "recommendations": recommendation_summary(plans),
            "recommendation_cases": _labelled(cases, labels),
            "recommendations_by_workload": recommendations_by_workload(cases),
            "break_even": be, "break_even_labelled": _labelled(be, labels),
            "break_even_by_batch": break_even_by_batch(be),
            "break_even_exceptions": break_even_exceptions(be, labels),
            "negative": neg, "negative_labelled": _labelled(neg, labels),
            "negative_by_workload": negative_by_workload(neg),
            "priced": price, "decisions": decisions,
            "decisions_labelled": _labelled(decisions, labels),
            "priced_by_sku": priced_by_sku(decisions, labels), "kv": kv,
            "paid_at_zero": paid_at_zero,
            "paid_at_zero_labelled": _labelled(paid_at_zero, labels)}


def _paid_at_zero(sweeps) -> pd.DataFrame:
    """Speculative cells with zero acceptance whose whole speedup interval lies above 1:
    speculation cannot have saved a step there, so the gap is drift between the two arms."""
    zero = []
    for run in sweeps:
        iv = rep_intervals(run)
        for _, c in ok_cells(run).query("gamma > 0 and alpha == 0").iterrows():
            interval = speedup_interval(iv, c["workload"], int(c["gamma"]), int(c["batch"]))
            if interval is not None and interval[0] > 1:
                zero.append({"sku": run.sku, "workload": c["workload"],
                             "batch": int(c["batch"]), "gamma": int(c["gamma"]),
                             "run_id": run.run_id})
    return pd.DataFrame(zero, columns=["sku", "workload", "batch", "gamma", "run_id"])


def _regret_wrong(r: pd.DataFrame, labels: dict) -> pd.DataFrame:
    """The held-out groups where the planner's γ was not the best measured one, worst first."""
    columns = ["SKU", "workload", "batch", "planner: γ", "best γ", "planner: regret %",
               "planner: error at its γ %"]
    if r.empty:
        return pd.DataFrame(columns=columns)
    wrong = r[r["planner: regret %"] > 0].sort_values("planner: regret %", ascending=False)
    return _labelled(wrong, labels)[columns]


def _regret_numbers(r: pd.DataFrame, labels: dict) -> dict:
    """The planner's regret on held-out SKUs against its rivals, and its worst case."""
    if r.empty:
        return {"regret_groups": 0, "regret_planner_median": float("nan"),
                "regret_planner_worst": float("nan"), "regret_best_rival": "—",
                "regret_best_rival_median": float("nan"), "regret_worst_case": "none",
                "regret_wrong_n": 0,
                "regret_goal": "not judged (one SKU: nothing to hold out)"}
    s = regret_summary(r).set_index("rule")
    rivals = s.drop(index="planner")
    best_rival = rivals["median regret %"].idxmin()
    wrong = r[r["planner: regret %"] > 0].sort_values("planner: regret %", ascending=False)
    median = float(s.loc["planner", "median regret %"])
    beats = bool((median < rivals["median regret %"]).all())
    return {"regret_groups": len(r), "regret_planner_median": median,
            "regret_planner_worst": float(s.loc["planner", "worst regret %"]),
            "regret_best_rival": best_rival,
            "regret_best_rival_median": float(rivals.loc[best_rival, "median regret %"]),
            "regret_worst_case": _case(labels, wrong.iloc[0]) if len(wrong) else "none",
            "regret_wrong_n": len(wrong),
            "regret_goal": ("met" if median <= REGRET_GOAL_PCT and beats else "missed")}


#: The planner's goal on held-out SKUs: median regret at most this, and below every rival's.
REGRET_GOAL_PCT = 2.0
