"""The accuracy chapter's numbers: the headline model and its rivals over every SKU, the host
as the unit of evidence (transfer tiers, sealed verdicts per host session, one SKU on two
hosts), then eq. 1 on the quoted grid. Sentences over many SKUs or hosts are counts ("on k of n
SKUs"); the tables beside them name which (issue 38)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from specbench.report import curves, evaluation, transfer, wording
from specbench.report.analysis import accuracy_table, sweep_cells
from specbench.report.chapters.hosts import (  # the host-unit half, shown in this chapter
    count_across, host_numbers, judged_sweeps, sealed_numbers, sealed_table, session_labels,
    tier_table, twin_hosts, twin_summary)
from specbench.report.chapters.base import (
    Numbers,
    direction_phrase,
    error_word,
    first_sku,
    floor_split,
    greedy_cells,
    latest_floor,
    pct,
    range_phrase,
    roofline_both_directions,
    roofline_worse_than_zero,
    run_ids,
    step_counts,
    sweep_run,
)
from specbench.report.evaluation import (
    GOAL_B4_MAPE_PCT,
    GOAL_MAPE_PCT,
    GOAL_TRANSFER_PCT,
    evidence,
    host_noise_summary,
    noise_table,
    quick_sweep_summary,
    sampled_evidence,
)
from specbench.report.transfer import leave_one_sku_out
from specbench.report.wording import claim
from specbench.store.runs import DEFAULT_ROOT
from specbench.theory.errors import mape, mape_interval, mape_of
from specbench.theory.predict import (
    HEADLINE,
    MIN_IDENTIFYING_SHARE,
    MODELS,
    host_ratio_sensitivity,
)

__all__ = ["count_across", "headline", "host_numbers", "judged_sweeps", "numbers", "sealed_numbers",
           "sealed_table", "session_labels", "tier_table", "twin_hosts", "twin_summary"]



def numbers(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None,
            loso: pd.DataFrame | None = None, every: pd.DataFrame | None = None) -> Numbers:
    """The accuracy chapter: the headline model against its rivals over every SKU (``hm_*``,
    :func:`headline`), the host as the unit (``hu_*``, :func:`host_numbers`; ``every`` is
    :func:`sweep_cells` with ``every_session``), then eq. 1 on the quoted grid."""
    cells = sweep_cells(root) if cells is None else cells
    return (_quoted_grid(root).merge(headline(cells, loso)).merge(sealed_numbers(root, cells))
            .merge(host_numbers(root, every)))


def _quoted_grid(root) -> Numbers:
    cells = greedy_cells(root)
    first = first_sku(cells)
    spec = first[first["gamma"] > 0]
    rep, opn = spec[spec["workload"] == "repeat"], spec[spec["workload"] == "open"]
    n = Numbers()
    n.add(run_ids(cells), sku0=first["sku_label"].iloc[0], n_spec_cells=len(spec),
          mape_eq1_repeat=mape_of(rep["err_eq1_pct"]),
          mape_eq1_open=mape_of(opn["err_eq1_pct"]),
          mape_blind_repeat=mape_of(rep["err_blind_pct"]),
          mape_blind_open=mape_of(opn["err_blind_pct"]),
          signed_eq1_repeat=float(rep["err_eq1_pct"].mean()),
          under_share_repeat=pct((rep["err_eq1_pct"] < 0).mean()),
          exact_mape=mape(spec["pred_exact_ms"], spec["pot_ms"]),
          mape_eq1_all=mape_of(spec["err_eq1_pct"]),
          open_over_skus=open_over_skus(accuracy_table(cells)),
          **open_over_counts(accuracy_table(cells)))
    # The exact divisor: where the gap to αγ+1 comes from. Whether a proposer ever drafts
    # fewer than γ tokens is the engine's behaviour, not a law: computed, not guarded.
    short = spec["gamma"] * spec["drafts"] - spec["draft_tokens"]
    n.add(short_drafts_sentence=(
        "no step drafted fewer than γ tokens: draft tokens = γ × drafting steps in every cell"
        if (short == 0).all() else
        f"in {int((short != 0).sum())} of {len(spec)} cells some steps drafted fewer than γ "
        f"tokens ({int(short.clip(lower=0).sum())} draft tokens short in all), so short drafts "
        "explain part of the gap"))
    counts = step_counts(root, first)
    rc = counts[(counts["workload"] == "repeat") & (counts["gamma"] > 0)]
    oc = counts[(counts["workload"] == "open") & (counts["gamma"] > 0)]
    n.add(repeat_nodraft_steps_max=int((rc["decode_steps"] - rc["drafting_steps"]).max()
                                       // first["n_reps"].iloc[0]),
          open_drafting_pct=range_phrase(pct(oc["drafting_share"].min()),
                                   pct(oc["drafting_share"].max()), ".1f"),
          open_b4_drafting_pct=range_phrase(pct(oc[oc["batch"] == 4]["drafting_share"].min()),
                                      pct(oc[oc["batch"] == 4]["drafting_share"].max()), ".1f"),
          max_tokens=int(sweep_run(root, first["run_id"].iloc[0]).manifest["grid"]["max_tokens"]))
    _add_cycle_costs(n, root, first, spec, cells)
    _add_ablation_and_identities(n, root, first, spec, cells)
    return n


def _add_cycle_costs(n: Numbers, root, first: pd.DataFrame, spec: pd.DataFrame,
                     cells: pd.DataFrame) -> None:
    """The per-cycle residual (with αγ+1 and with the exact divisor) against the host floor,
    and the batch-4 verify cost against the roofline's."""
    cost = curves.cycle_costs(first)
    r1 = cost[(cost["workload"] == "repeat") & (cost["batch"] == 1)]
    n.add(residual_mean_ms=float(r1["residual_alpha_ms"].mean()),
          residual_min_ms=float(r1["residual_alpha_ms"].min()),
          residual_max_ms=float(r1["residual_alpha_ms"].max()),
          residual_exact_mean_ms=float(r1["residual_exact_ms"].mean()),
          residual_exact_drop_pct=pct(1 - r1["residual_exact_ms"].mean()
                                       / r1["residual_alpha_ms"].mean()))
    floor = latest_floor(root, first["sku"].iloc[0])
    if floor is not None:
        per_step, _, _ = floor_split(floor)
        host_ms = float(per_step["host_ms"].iloc[0])
        n.add([floor.run_id], floor_host_ms=host_ms,
              residual_share_pct=pct(r1["residual_exact_ms"].mean() / host_ms))
    else:
        n.add(floor_host_ms=float("nan"), residual_share_pct=float("nan"))
    # Batch 4: the verify cost, measured where every step drafts ('repeat').
    r4 = cost[(cost["workload"] == "repeat") & (cost["batch"] == 4)].sort_values("gamma")
    for _, row in r4.iterrows():
        g = int(row["gamma"])
        n.add(**{f"b4_cost_g{g}": float(row["measured_cost"]),
                 f"b4_roof_g{g}": float(row["roofline_cost"])})
    n.add(b4_gammas=", ".join(str(int(g)) for g in r4["gamma"]),
          b4_measured_costs=" / ".join(f"{v:.2f}" for v in r4["measured_cost"]),
          b4_roofline_costs=" / ".join(f"{v:.2f}" for v in r4["roofline_cost"]),
          b4_cost_word=wording.size_word(float(r4["measured_cost"].min() - 1)),
          b4_roofline_direction=direction_phrase(r4),
          b1_d_word=wording.size_word(float(curves.roofline_d(spec[spec["batch"] == 1]).max())))
    worse, both = roofline_worse_than_zero(cells), roofline_both_directions(cells)
    n.add(b4_roofline_worse_where=count_across(worse),
          b4_roofline_worse_count=int(sum(worse.values())),
          b4_both_directions_where=count_across(both))


def _add_ablation_and_identities(n: Numbers, root, first: pd.DataFrame, spec: pd.DataFrame,
                                 cells: pd.DataFrame) -> None:
    """Eq. 1 with d = 0 and the acceptance-blind model per batch; the shortfall split and the
    timing-derived α as guarded identities; the cross-SKU transfer."""
    # The ablation: eq. 1 with d = 0.
    abl = curves.mape_by(curves.error_ablation(first), by=["batch"]).set_index("batch")
    for b, row in abl.iterrows():
        n.add(**{f"b{b}_mape_eq1": float(row["eq1_abs_pct"]),
                 f"b{b}_mape_d0": float(row["eq1_d0_abs_pct"]),
                 f"b{b}_mape_blind": float(row["blind_abs_pct"]),
                 f"b{b}_blind_vs_eq1": error_word(row["blind_abs_pct"], row["eq1_abs_pct"]),
                 f"b{b}_d0_vs_eq1": error_word(row["eq1_d0_abs_pct"], row["eq1_abs_pct"])})
    # Shortfall split and timing-derived α: identities, guarded.
    parts = curves.shortfall_split(cells)
    total = parts.groupby(["sku", "batch", "gamma"])["value"].sum()
    ideal = parts.groupby(["sku", "batch", "gamma"])["ideal"].first()
    n.add(stack_identity=claim(np.allclose(total, ideal),
                               "each bar stacks to the ideal speedup αγ+1 given the counter α"))
    t = spec.dropna(subset=["alpha_timing"])
    back = t["t_base_ms"] * (1 + curves.roofline_d(t)) / (t["alpha_timing"] * t["gamma"] + 1)
    n.add(timing_identity=claim(np.allclose(back, t["pot_ms"]),
                                "it reproduces the latency by construction"))
    transfer_numbers = _transfer(cells)
    n.add(**transfer_numbers, transfer_pair=_pair_sentence(
        root, transfer_numbers.get("cal_run"), transfer_numbers.get("held_run")))


def open_over_skus(table: pd.DataFrame) -> str:
    """Whether eq. 1 errs less than the acceptance-blind model on 'open' on every SKU, not only
    on the one the chapter quotes, read from Table 1 (:func:`analysis.accuracy_table`); each SKU
    where it does not is named with its numbers, and the reason is given only where the table
    shows it (batch 1 won, every batch-4 cell over-predicted: mean signed error = MAPE)."""
    opn = table.xs("open", level="workload")
    pooled, b1 = opn.xs("all", level="batch"), opn.xs("1", level="batch")
    eq1, blind = "eq. 1 MAPE %", "acceptance-blind MAPE %"
    sentence = (f"Over all {len(pooled)} SKUs, eq. 1 errs less than the acceptance-blind model "
                f"on 'open' at batch 1 on {int((b1[eq1] < b1[blind]).sum())} of {len(b1)}")
    losers = pooled[pooled[eq1] >= pooled[blind]]
    if losers.empty:
        return sentence + ", and with batch 4 included on every one"
    named = []
    for sku, row in losers.iterrows():
        b4 = opn.loc[(sku, "4")] if (sku, "4") in opn.index else None
        won_b1 = sku in b1.index and b1.loc[sku, eq1] < b1.loc[sku, blind]
        over_b4 = b4 is not None and np.isclose(b4["eq. 1 mean signed %"], b4[eq1])
        named.append(f"{sku} (eq. 1 {row[eq1]:.1f} percent, the blind model {row[blind]:.1f}" + (
            f"; at batch 4 eq. 1 over-predicts every cell, by up to {b4['eq. 1 max %']:.0f} "
            "percent: the roofline's batch-4 d(γ) overstates that CPU's verify step"
            if won_b1 and over_b4 else "") + ")")
    return (sentence + "; with batch 4 included it errs more than the blind model on "
            f"{len(losers)} of them, against the paper's claim: " + "; ".join(named))


def open_over_counts(table: pd.DataFrame) -> dict:
    """On how many SKUs eq. 1 errs less than the acceptance-blind model on 'open', at batch 1
    and with batch 4 included (``open_b1_wins``, ``open_all_wins`` of ``open_skus``); Table 1
    (:func:`analysis.accuracy_table`) names them."""
    opn = table.xs("open", level="workload")
    pooled, b1 = opn.xs("all", level="batch"), opn.xs("1", level="batch")
    eq1, blind = "eq. 1 MAPE %", "acceptance-blind MAPE %"
    return {"open_skus": int(len(pooled)), "open_b1_skus": int(len(b1)),
            "open_b1_wins": int((b1[eq1] < b1[blind]).sum()),
            "open_all_wins": int((pooled[eq1] < pooled[blind]).sum())}


def _pair_sentence(root, cal_run=None, held_run=None) -> str:
    """What separates the two SKUs of the held-out test, from their manifests."""
    ids = [cal_run, held_run]
    if not (cal_run and held_run):
        return "Only one SKU is stored"
    a, b = (sweep_run(root, i).manifest for i in ids)

    def cpu(m):
        return (m["hardware"].get("gpus") or [{}])[0].get("name") or m["hardware"].get("cpu_model")

    if cpu(a) == cpu(b) and a["hardware"].get("threads") == b["hardware"].get("threads"):
        return (f"The two SKUs compared are the same hardware ({cpu(a)}, "
                f"{a['hardware'].get('threads')} thread(s)) in two dtypes, "
                f"{a.get('dtype')} and {b.get('dtype')}")
    return f"The two SKUs compared are different hardware: {cpu(a)} and {cpu(b)}"


def _transfer(cells: pd.DataFrame) -> dict:
    quoted = first_sku(cells)["sku"].iloc[0]
    skus = [quoted] + [s for s in dict.fromkeys(cells["sku"]) if s != quoted]
    if len(skus) < 2:
        nan = float("nan")
        return {"have_transfer": False, "cal_sku": cells["sku_label"].iloc[0], "held_sku": "—",
                "transfer_alpha_gap": nan, "transfer_eq1_mape": nan, "transfer_ratio_mape": nan,
                "transfer_winner": "—", "transfer_factor": nan,
                "transfer_meaning": "only one SKU is stored, so there is no held-out test yet"}
    try:
        t = transfer.held_out(cells, skus[0], skus[1])
    except ValueError:   # the next SKU shares no cell with the quoted one: try the others
        return _transfer(cells[cells["sku"] != skus[1]])
    gap = (t["alpha_transferred"] - t["alpha_own"]).abs().max()
    eq1 = mape_of(t["model_err_pct"])
    ratio = mape_of(t["ratio_err_pct"])
    label = dict(zip(cells["sku"], cells["sku_label"], strict=True))
    same = gap < 0.01
    run_of = dict(zip(cells["sku"], cells["run_id"], strict=True))
    return {"have_transfer": True, "cal_sku": label[skus[0]], "held_sku": label[skus[1]],
            "cal_run": run_of[skus[0]], "held_run": run_of[skus[1]],
            "transfer_alpha_gap": float(gap), "transfer_eq1_mape": eq1,
            "transfer_ratio_mape": ratio,
            "transfer_winner": "ratio transfer" if ratio < eq1 else "model",
            "transfer_factor": max(eq1, ratio) / min(eq1, ratio),
            "transfer_meaning": (
                "the counter α is the same in both runs, so the test does not exercise the "
                "transfer of α at all: it measures the roofline's error on the held-out SKU"
                if same else
                "α differs between the runs, so the test does exercise the transfer of α")}


def headline(cells: pd.DataFrame, loso: pd.DataFrame | None = None) -> Numbers:
    """The accuracy chapter's numbers and words (with the run ids they came from), each
    prefixed ``hm_``: this chapter also glues numbers.accuracy()."""
    n = Numbers()

    def add(runs=(), **values):
        n.add(runs=runs, **{f"hm_{k}": v for k, v in values.items()})
    c = evidence(cells)
    micro_runs = [r for r in dict.fromkeys(c.get("d_micro_run", pd.Series(dtype=object)))
                  if isinstance(r, str)]
    add(runs=list(dict.fromkeys(c["run_id"])) + micro_runs, cells_evaluated=int(len(c)),
        skus_evaluated=int(c["sku"].nunique()), goal_mape=GOAL_MAPE_PCT,
        goal_transfer=GOAL_TRANSFER_PCT,
        micro_cells=int((c["d_source"] == "microbenchmark").sum()))
    mapes = _model_mapes(c)
    add(**mapes)
    add(**_subsets(c))
    add(**host_noise_summary(c))
    add(**quick_sweep_summary(cells))
    sens = host_ratio_sensitivity(cells)
    add(h_identified_groups=int((sens["cells"] > 0).sum()), h_groups=int(len(sens)),
        h_max_move=float(sens["max_move"].max()) if sens["max_move"].notna().any()
        else float("nan"), min_identifying_share=MIN_IDENTIFYING_SHARE)
    add(**_engines(c))
    sampled_runs, sampled = _sampled(cells)
    add(runs=sampled_runs, **sampled)
    add(goal_met=("met" if mapes[f"mape_{HEADLINE}_hi"] <= GOAL_MAPE_PCT else
                  "met by the point estimate but not by its interval"
                  if mapes[f"mape_{HEADLINE}"] <= GOAL_MAPE_PCT else "missed"))
    add(**_wins(c))
    add(within_noise=int(noise_table(cells)["within_noise"].sum()))
    add(eq1_vs_blind=wording.compare(mapes["mape_eq1"], 0, mapes["mape_blind"], 0).replace(
        "lower", "lower than").replace("higher", "higher than"))
    # (Per prompt at batch 1 where the caller passes it; the book does.)
    loso = leave_one_sku_out(cells) if loso is None else loso
    if len(loso):
        add(**_loso_numbers(loso), **_per_held_out(loso, transfer.cost_structure(cells)),
            threads_sentence=_threads_sentence(cells))
    return n


def _model_mapes(c: pd.DataFrame) -> dict:
    """Every model's MAPE with its interval, per batch, on the microbenchmarked cells, and the
    batch-4 goal."""
    out = {}
    for m in MODELS:
        mape_, lo, hi = mape_interval(c[f"err_{m}_pct"])
        out.update({f"mape_{m}": mape_, f"mape_{m}_lo": lo, f"mape_{m}_hi": hi})
    for b, g in c.groupby("batch"):
        for m in (HEADLINE, "eq1", "blind", "d_zero"):
            out[f"b{b}_mape_{m}"] = mape_interval(g[f"err_{m}_pct"])[0]
    micro = c[c["d_source"] == "microbenchmark"]
    if len(micro):
        mape_, lo, hi = mape_interval(micro[f"err_{HEADLINE}_pct"])
        out.update(mape_micro=mape_, mape_micro_lo=lo, mape_micro_hi=hi)
    for b, g in c.groupby("batch"):
        _, lo, hi = mape_interval(g[f"err_{HEADLINE}_pct"])
        out.update({f"b{b}_mape_model_lo": lo, f"b{b}_mape_model_hi": hi,
                    f"b{b}_cells": int(len(g))})
    out.update(goal_b4_mape=GOAL_B4_MAPE_PCT,
               goal_b4_met=("met" if out.get(f"b4_mape_{HEADLINE}", np.inf) <= GOAL_B4_MAPE_PCT
                            else "missed"))
    return out


def _subsets(c: pd.DataFrame) -> dict:
    """The headline model's MAPE on the cells a reader may doubt: batch-N cells with and
    without decode windows, the worst three cells, loaded and quiet hosts, unstable cells."""
    # Batch-N cells whose runs predate decode windows carry other requests' prefill.
    b4 = c[c["batch"] > 1]
    removed = b4["overlap_removed"].eq(True) if "overlap_removed" in b4 \
        else pd.Series(False, index=b4.index)
    worst = c.reindex(c[f"err_{HEADLINE}_pct"].abs().sort_values(ascending=False).index).head(3)
    loaded = c["loaded"].eq(True) if "loaded" in c else pd.Series(False, index=c.index)
    unstable = c["unstable"].eq(True) if "unstable" in c else pd.Series(False, index=c.index)
    return dict(
        b4_windowed_cells=int(removed.sum()), b4_overlap_cells=int((~removed).sum()),
        b4_windowed_mape=mape_of(b4[removed][f"err_{HEADLINE}_pct"])
        if removed.any() else float("nan"),
        b4_overlap_mape=mape_of(b4[~removed][f"err_{HEADLINE}_pct"])
        if (~removed).any() else float("nan"),
        worst_cells="; ".join(f"{r.sku_label}, '{r.workload}' γ={int(r.gamma)} batch "
                              f"{int(r.batch)}: {getattr(r, f'err_{HEADLINE}_pct'):+.0f} %"
                              for r in worst.itertuples()),
        loaded_cells=int(loaded.sum()),
        loaded_mape=mape_of(c[loaded][f"err_{HEADLINE}_pct"]) if loaded.any()
        else float("nan"),
        quiet_mape=mape_of(c[~loaded][f"err_{HEADLINE}_pct"]) if (~loaded).any()
        else float("nan"),
        unstable_cells=int(unstable.sum()))


def _engines(c: pd.DataFrame) -> dict:
    """Both engines: is the same equation right on a system whose step costs are built
    otherwise?"""
    hf = c["sku"].str.endswith("-hf")
    if not hf.any():
        return dict(hf_cells=0, engines_sentence="No run of the second engine (transformers' "
                    "prompt lookup, `make measure-transformers`) is in the store yet")
    m_hf, lo_hf, hi_hf = mape_interval(c[hf][f"err_{HEADLINE}_pct"])
    m_v = mape_of(c[~hf & (c["batch"] == 1)][f"err_{HEADLINE}_pct"])
    e_hf = mape_of(c[hf]["err_eq1_pct"])
    return dict(
        hf_cells=int(hf.sum()), hf_mape=m_hf, hf_mape_lo=lo_hf, hf_mape_hi=hi_hf,
        engines_sentence=(
            f"On the transformers engine ({int(hf.sum())} batch-1 cells) the headline model "
            f"errs by {m_hf:.1f} percent ({lo_hf:.1f}–{hi_hf:.1f}) and eq. 1 by {e_hf:.1f}, "
            f"against {m_v:.1f} percent on vLLM's batch-1 cells: the same equation "
            + ("describes both engines within the goal of "
               f"{GOAL_MAPE_PCT:g} percent" if max(m_hf, m_v) <= GOAL_MAPE_PCT else
               "describes both engines about equally well" if abs(m_hf - m_v) <=
               wording.CLOSE_ERRORS_PCT else
               f"fits {'vLLM' if m_v < m_hf else 'transformers'} clearly better")))


def _sampled(cells: pd.DataFrame) -> tuple[list, dict]:
    """The sampled cells (T > 0, patched engine) as their own group: their runs and numbers."""
    sampled = sampled_evidence(cells)
    if not len(sampled):
        return [], dict(sampled_cells=0, sampled_sentence=(
            "No cell sampled at temperature > 0 by the patched engine is in the store yet; "
            "cells sampled by the engine as released are not evidence (its sampling fails "
            "the lossless test)"))
    mape_, lo, hi = mape_interval(sampled[f"err_{HEADLINE}_pct"])
    temperatures = ", ".join(f"{x:g}" for x in sorted(sampled["temperature"].unique()))
    met = "met" if mape_ <= GOAL_MAPE_PCT else "missed"
    return list(dict.fromkeys(sampled["run_id"])), dict(
        sampled_cells=int(len(sampled)), sampled_mape=mape_, sampled_mape_lo=lo,
        sampled_mape_hi=hi, sampled_temperatures=temperatures, sampled_goal_met=met,
        sampled_sentence=(f"On the {len(sampled)} sampled cells (T = {temperatures},"
                          f" the patched engine) the headline model errs by {mape_:.1f} percent "
                          f"({lo:.1f}–{hi:.1f}): the goal of {GOAL_MAPE_PCT:g} percent is "
                          f"{met}"))


def _wins(c: pd.DataFrame) -> dict:
    """Which model wins where: per SKU × batch × workload group, the lower MAPE."""
    groups = c.groupby(["sku", "batch", "workload"])
    wins = {m: 0 for m in (HEADLINE, "eq1", "blind")}
    for _, g in groups:
        errs = {m: mape_of(g[f"err_{m}_pct"]) for m in wins}
        wins[min(errs, key=errs.get)] += 1
    return dict(groups=int(groups.ngroups), wins_model=wins[HEADLINE], wins_eq1=wins["eq1"],
                wins_blind=wins["blind"])


def _loso_numbers(loso: pd.DataFrame) -> dict:
    """Leave one SKU out: the model against ratio transfer on the held-out cells."""
    m, mlo, mhi = mape_interval(loso["model_err_pct"])
    r, rlo, rhi = mape_interval(loso["ratio_err_pct"])
    return dict(
        loso_per_prompt_cells=int(loso.get("per_prompt", pd.Series(dtype=bool)).sum()),
        loso_cells=int(len(loso)), loso_model=m, loso_model_lo=mlo, loso_model_hi=mhi,
        loso_ratio=r, loso_ratio_lo=rlo, loso_ratio_hi=rhi,
        loso_winner="the model" if m < r else "ratio transfer",
        loso_goal=("met" if m <= GOAL_TRANSFER_PCT and m < r else "missed"),
        interior_loso_cells=int(((loso["alpha_own"] > 0.1) & (loso["alpha_own"] < 0.9)).sum()))


def _threads_sentence(cells: pd.DataFrame) -> str:
    """How cleanly a multi-thread SKU measured beside its one-thread twin (same CPU, dtype):
    with every core bound to the engine's threads, the engine loop shares a core with them."""
    c = cells[(cells["temperature"] == 0) & (cells["gamma"] > 0)]
    parts = []
    for sku in sorted(c["sku"].unique()):
        m = re.search(r"-(\d+)t-", sku)
        twin = sku.replace(m.group(0), "-1t-") if m and m.group(1) != "1" else None
        if twin is None or twin not in set(c["sku"]):
            continue
        mine, theirs = c[c["sku"] == sku], c[c["sku"] == twin]

        def verify_ms(x):   # the kernels' extra time of a γ=4 verify step at batch 1
            x = x[(x["gamma"] == 4) & (x["batch"] == 1)]
            return float((x["d"] * x["t_base_ms"]).median())
        parts.append(f"{sku}'s kernels add {verify_ms(mine):.1f} ms to a γ=4 verify step at "
                     f"batch 1 against {verify_ms(theirs):.1f} ms on one thread, and it has "
                     f"{int(mine['unstable'].eq(True).sum())} of {len(mine)} "
                     f"speculative cells flagged unstable (median spread of repetitions "
                     f"{mine['rep_spread_pct'].median():.1f} percent) against "
                     f"{int(theirs['unstable'].eq(True).sum())} of {len(theirs)} "
                     f"({theirs['rep_spread_pct'].median():.1f} percent) for {twin}")
    if not parts:
        return ("No SKU with more than one engine thread is in the store beside its "
                "one-thread twin")
    return "; ".join(parts)


def _per_held_out(loso: pd.DataFrame, cost: pd.DataFrame) -> dict:
    """The issue's transfer goal per held-out SKU and batch: the model within the goal on every
    one, and below ratio transfer on every one whose cost structure differs."""
    t = evaluation.transfer_table(loso, cost)
    t = t[t["held-out SKU"] != "all"]
    differs = t[t["cost differs"].eq(True)]
    within = t[t["model MAPE %"] <= evaluation.GOAL_TRANSFER_PER_SKU_PCT]
    strict = t[t["model MAPE %"] <= GOAL_TRANSFER_PCT]
    better = differs["model better"].astype(bool)
    wins, losses = differs[better], differs[~better]
    named = "; ".join(f"{r['held-out SKU']} batch {r['batch']}: model {r['model MAPE %']:.1f} "
                      f"against ratio {r['ratio MAPE %']:.1f} percent"
                      for _, r in losses.iterrows())
    return {"loso_groups": int(len(t)), "loso_within_goal": int(len(within)),
            "loso_within_strict": int(len(strict)),
            "goal_transfer_per_sku": evaluation.GOAL_TRANSFER_PER_SKU_PCT,
            "loso_per_sku_goal": ("met" if len(within) == len(t) and len(wins) == len(differs)
                                  else "missed"),
            "cost_differs_pct": transfer.COST_DIFFERS_PCT,
            "loso_cost_differs": int(len(differs)), "loso_differs_model_wins": int(len(wins)),
            "loso_cost_sentence": (
                "No held-out SKU's cost structure differs from every other's by "
                f"{transfer.COST_DIFFERS_PCT:g} percent, so no held-out group tests transfer "
                "across a change of cost" if differs.empty else
                f"On {len(differs)} held-out (SKU, batch) groups the cost structure differs by at "
                f"least {transfer.COST_DIFFERS_PCT:g} percent from every other SKU's; the model "
                f"beats ratio transfer on {len(wins)} of them"
                + (f" and loses on {len(losses)} ({named})" if len(losses) else
                   ", every one"))}


# ---- Short computed words: counts over the evidence, never a list of names (issue 38) ----
