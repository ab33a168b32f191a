"""The study's findings, which the front page and the story chapter both state: the study in one
page, with its thesis sentence (one derived set of values, so the two pages cannot disagree)."""
from __future__ import annotations

import pandas as pd

from specbench.report import curves, wording
from specbench.report import floor as host_floor
from specbench.report.numbers import (
    Numbers,
    against_base,
    batch1_verify_cost,
    batch4_against,
    count_of,
    count_phrase,
    direction_phrase,
    error_word,
    first_sku,
    greedy_cells,
    pct,
    penalty,
    regime_sentence,
    regime_summary,
    regime_table,
    run_ids,
    spread,
    sweep_run,
)
from specbench.report.host_evidence import batch4_goal_numbers, host_numbers
from specbench.report.summary import summary
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["count_of", "numbers", "regime_summary", "thesis"]



def thesis(cells: pd.DataFrame, table: pd.DataFrame) -> str:
    """What these runs support, in one sentence chosen from the data."""
    spec = first_sku(cells)
    spec = spec[spec["gamma"] > 0]
    repeat_words = against_base(spec[spec["workload"] == "repeat"], cells)
    open_words = against_base(spec[spec["workload"] == "open"], cells)
    accepted_saves = (repeat_words == "faster").all()
    rejected_saves = (open_words == "faster").any()
    regimes = set(table["regime"])
    if accepted_saves and not rejected_saves:
        saving = ("the time per token falls only where drafts are accepted, so the engine's "
                  "acceptance counters set the saving")
    else:
        saving = ("the time per token does not follow acceptance alone here "
                  f"('repeat': {count_phrase(repeat_words)} faster; "
                  f"'open': {count_phrase(open_words)})")
    if regimes == {"host-dominated"}:
        cost = "the cost spread over the accepted tokens is a host-dominated step"
    elif "host-dominated" in regimes:
        cost = "the step is host-dominated on some SKUs and compute-dominated on others"
    else:
        cost = ("but the step here is mostly compute, so these runs cannot tell host "
                "amortization from the amortization of weight streaming")
    return f"{saving[0].upper() + saving[1:]}. {cost[0].upper() + cost[1:]}."


def numbers(root=DEFAULT_ROOT, cells: pd.DataFrame | None = None) -> Numbers:
    cells = greedy_cells(root, cells)
    first = first_sku(cells)
    spec = first[first["gamma"] > 0]
    run = sweep_run(root, first["run_id"].iloc[0])
    table = regime_table(root, cells)
    n = Numbers()
    n.add(run_ids(cells) + [r for r in table["host-floor run"] if r != "—"],
          sku=first["sku_label"].iloc[0], gamma_max=int(spec["gamma"].max()),
          open_penalty=penalty(run, "open"), repeat_penalty=penalty(run, "repeat"),
          regime_sentence=regime_sentence(table), regime_summary=regime_summary(table),
          floor_skus=int((table["host-floor run"] != "—").sum()), n_skus=len(table),
          thesis=thesis(cells, table))
    rep, opn = spec[spec["workload"] == "repeat"], spec[spec["workload"] == "open"]
    n.add(repeat_alpha_min=float(rep["alpha"].min()), open_alpha_max=float(opn["alpha"].max()))
    b1, b4 = spec[spec["batch"] == 1], spec[spec["batch"] == 4]
    rep1, opn1 = b1[b1["workload"] == "repeat"], b1[b1["workload"] == "open"]
    top = rep1.loc[rep1["gamma"].idxmax()]
    n.add(b1_repeat_speedup_max=float(top["speedup"]),
          b1_open_speedup_min=float(opn1["speedup"].min()),
          b1_open_speedup_max=float(opn1["speedup"].max()),
          b1_open_vs_base=count_phrase(against_base(opn1, cells)),
          b1_open_spread_max_pct=float(max(spread(r) for _, r in
                                           first[(first["workload"] == "open")
                                                 & (first["batch"] == 1)].iterrows())))
    _add_model_errors(n, cells)
    _add_verify_costs(n, cells, first, b1, b4)
    # Headings say which way the result goes, judged on every SKU (the exceptions named).
    against = batch4_against(cells)
    heading = (f"Against the thesis: batch 4, {wording.across(against)}." if any(against.values())
               else f"For the thesis: batch 4, {wording.across(dict.fromkeys(against, True))}.")
    n.add(b4_heading=heading, b4_against_count=count_of(against))
    _add_host_floor(n, root, cells)
    _add_transfer(n, root)
    _add_drafts(n, root)
    return n.merge(summary(root, cells))


#: The accuracy chapter's host-unit values the front page states as they are (``i_`` prefix):
#: speedups lent across hosts at batch 1 and 4 against ratio transfer, and the newest sealed one.
FRONT_TRANSFER = ("hu_b1_tier_model", "hu_b1_tier_ratio", "hu_b4_tier_model", "hu_b4_tier_ratio",
                  "hu_newest_cells", "hu_newest_model", "hu_newest_ratio", "hu_newest_verdict",
                  "hu_newest_goal", "hu_sealed_goal")


def _add_transfer(n: Numbers, root) -> None:
    """Transfer and sealed speedups as the accuracy chapter judges them (one computation,
    :func:`specbench.report.host_evidence.host_numbers`)."""
    hosts, goal = host_numbers(root), batch4_goal_numbers(root)
    n.add(hosts.runs, **{"i_" + k.removeprefix("hu_"): hosts[k] for k in FRONT_TRANSFER},
          **{"i_" + k.removeprefix("hu_"): v for k, v in goal.values.items()})


def _add_drafts(n: Numbers, root) -> None:
    """Draft models as the draft chapter measures them (:mod:`specbench.derive.drafts`)."""
    from specbench.derive.drafts import break_even, draft_cells
    cells = draft_cells(root)
    if cells.empty:
        n.add(dr_sentence="No draft model has been measured yet (`make measure-drafts`)")
        return
    faster = int((cells["speedup"] > 1).sum())
    table = break_even(root)
    short = int((table["alpha_max"] < table["break_even_engine"].fillna(1.0)).sum())
    reach = ("stayed below break-even in all" if short == len(table)
             else f"reached break-even in {len(table) - short} of the")
    n.add(sorted(set(cells["run_id"])), dr_sentence=(
        f"A draft model cut from the target made {'none' if faster == 0 else faster} of "
        f"{len(cells)} cells faster. Its acceptance {reach} {len(table)} settings"))


def _add_model_errors(n: Numbers, cells: pd.DataFrame) -> None:
    """Model errors over every SKU's greedy cells (a claim about the equation, not one
    machine)."""
    abl = curves.error_ablation(cells)
    by_batch = curves.mape_by(abl, by=["batch"]).set_index("batch")
    for b in by_batch.index:
        row = by_batch.loc[b]
        n.add(**{f"b{b}_mape_eq1": float(row["eq1_abs_pct"]),
                 f"b{b}_mape_blind": float(row["blind_abs_pct"]),
                 f"b{b}_mape_d0": float(row["eq1_d0_abs_pct"]),
                 f"b{b}_blind_vs_eq1": error_word(row["blind_abs_pct"], row["eq1_abs_pct"]),
                 f"b{b}_d0_vs_best": error_word(row["eq1_d0_abs_pct"],
                                                 min(row["eq1_abs_pct"], row["blind_abs_pct"]))})


def _add_verify_costs(n: Numbers, cells: pd.DataFrame, first: pd.DataFrame, b1: pd.DataFrame,
                      b4: pd.DataFrame) -> None:
    """The verify cost d: the roofline's, every SKU's microbenchmarked one at batch 1, and the
    measured cost of a batch-4 step on 'repeat'."""
    d1 = float(curves.roofline_d(b1).max())
    n.add(b1_d_max_pct=pct(d1), b1_d_word=wording.size_word(d1),
          b4_d_max_pct=pct(curves.roofline_d(b4).max()))
    # The same cost over every SKU, as its kernel microbenchmark measures it: on a CPU with
    # little arithmetic to spare, γ+1 rows are no longer nearly free even at batch 1.
    measured = batch1_verify_cost(cells)
    if len(measured):
        top = measured["d_max"].idxmax()
        below = {s: bool(r["d_max"] < wording.LARGE_COST) for s, r in measured.iterrows()}
        n.add(b1_d_below_large_count=count_of(below),
              b1_d_skus=len(measured), b1_d_large_bound_pct=pct(wording.LARGE_COST),
              b1_d_below_large=wording.across(below),
              b1_d_measured_max_pct=pct(measured.loc[top, "d_max"]),
              b1_d_measured_max_word=wording.size_word(float(measured.loc[top, "d_max"])),
              b1_d_measured_max_sku=top,
              b1_d_measured_max_gamma=int(measured.loc[top, "gamma"]))
    cost = curves.cycle_costs(first)
    rep4 = cost[(cost["workload"] == "repeat") & (cost["batch"] == 4)].sort_values("gamma")
    n.add(b4_repeat_cost_lo=float(rep4["measured_cost"].min()),
          b4_repeat_cost_hi=float(rep4["measured_cost"].max()),
          b4_roofline_cost_lo=float(rep4["roofline_cost"].min()),
          b4_roofline_cost_hi=float(rep4["roofline_cost"].max()),
          b4_cost_word=wording.size_word(float(rep4["measured_cost"].min() - 1)),
          b4_roofline_direction=direction_phrase(rep4))


def _add_host_floor(n: Numbers, root, cells: pd.DataFrame) -> None:
    """The host floor's verdict, from the host-floor chapter's numbers."""
    floor = host_floor.numbers(root, cells)
    if "host_ratio" in floor.values:
        n.add(floor.runs, host_ratio=floor["host_ratio"], host_invariance=floor["host_invariance"],
              floor_models=f"from {floor['small_label']} to {floor['large_label']}")
        n.add(floor_heading=("For the thesis: the host floor." if floor["host_invariance"]
                             == "model-size invariant" else "Against the thesis: the host floor."))
        n.add(host_size_verdict=("as the paper found on GPUs" if floor["host_invariance"]
                                 == "model-size invariant"
                                 else "where the paper found it invariant on GPUs"))
    else:
        n.add(host_size_verdict="which no host-floor run here measures")
        n.add(host_ratio=float("nan"), host_invariance="not measured",
              floor_models="between model sizes", floor_heading="The host floor.")


