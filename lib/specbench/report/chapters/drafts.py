"""The draft-model chapter's numbers: acceptance, both cost ratios, each formula's speedup
error and the break-even α, read from :mod:`specbench.derive.drafts` (nothing here measures
or fits)."""
from __future__ import annotations

import pandas as pd

from specbench.derive.drafts import (
    PREDICTORS,
    break_even,
    cost_split,
    draft_cells,
    draft_memory,
    draft_serving,
    table3,
)
from specbench.report.numbers import Numbers
from specbench.report.wording import and_list, span
from specbench.report.plan.worksheet import (
    DEMAND_TOKENS_PER_S,
    ITL_SLO_MS,
    PRICE_PER_REPLICA_HOUR,
    draft_costs,
)
from specbench.store.runs import DEFAULT_ROOT
from specbench.theory.errors import mape_of

__all__ = ["numbers", "cell_table", "predictor_errors", "break_even_table", "parity",
           "split_table", "measured_table3", "cost_table", "serving_table"]

NAMES = {"extended": "the model extended (held-out in-engine c)",
         "leviathan": "Leviathan with the draft-alone c",
         "leviathan_v": "Leviathan with that c and v = d(γ)/γ",
         "no_draft_term": "the model without a draft term"}


def predictor_errors(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Each predictor's speedup MAPE per batch and over every cell."""
    cells = draft_cells(root)
    rows = [{"predictor": NAMES[name], "what": what,
             "batch 1 MAPE %": mape_of(cells.loc[cells["batch"] == 1, f"err_{name}"]),
             "batch 4 MAPE %": mape_of(cells.loc[cells["batch"] == 4, f"err_{name}"]),
             "all cells MAPE %": mape_of(cells[f"err_{name}"])}
            for name, what in PREDICTORS.items()]
    return pd.DataFrame(rows)


def cell_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Per depth, batch and γ (workloads pooled by their median): what was measured."""
    cells = draft_cells(root)
    grouped = cells.groupby(["depth", "batch", "gamma"])
    return pd.DataFrame({
        "cells": grouped.size(),
        "α (counters)": grouped["alpha"].median(),
        "tokens per step L": grouped["emitted_per_step"].median(),
        "speedup": grouped["speedup"].median(),
        "c (draft alone)": grouped["c_leviathan"].median(),
        "c (in engine)": grouped["c_engine"].median()}).reset_index()


def break_even_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    table = break_even(root)
    return table[["depth", "batch", "gamma", "break_even_leviathan", "break_even_leviathan_v",
                  "break_even_engine", "alpha_min", "alpha_max", "faster", "cells"]].rename(
        columns={"break_even_leviathan": "break-even α, Leviathan",
                 "break_even_leviathan_v": "break-even α, Leviathan + v",
                 "break_even_engine": "break-even α, in-engine c + v",
                 "alpha_min": "measured α, lowest", "alpha_max": "measured α, highest",
                 "faster": "cells faster"})


def measured_table3(root=DEFAULT_ROOT) -> pd.DataFrame:
    """The worksheet's Table 3 at k = 4 and batch 1 with the measured costs, α as a column."""
    return table3(root).reset_index()


def cost_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Per depth and batch (workloads pooled by their median): the cheapest drafted γ's cost
    per million tokens against the target alone's, and how many cases meet the SLO."""
    costs = draft_costs(root)
    grouped = costs.groupby(["depth", "batch"])
    return pd.DataFrame({
        "target alone USD/M": grouped["off_usd"].median(),
        "best draft USD/M": grouped["draft_usd"].median(),
        "draft's change %": grouped["change_pct"].median(),
        "SLO met, alone": grouped["off_meets_slo"].sum().astype(int),
        "SLO met, draft": grouped["draft_meets_slo"].sum().astype(int)}).reset_index()


def serving_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Every draft-serving level and arm: what the operator pays under load."""
    rows = draft_serving(root)
    return rows[["concurrency", "arm", "tpot_ms", "speedup", "alpha", "slo_met_p95",
                 "usd_per_million"]].rename(columns={
                     "tpot_ms": "median TPOT (ms)", "speedup": "speedup over off",
                     "alpha": "α (counters)", "slo_met_p95": "SLO met at p95",
                     "usd_per_million": "USD per M SLO tokens"})


def split_table(root=DEFAULT_ROOT) -> pd.DataFrame:
    return cost_split(root)[["depth", "batch", "per_step", "per_token", "c_leviathan"]].rename(
        columns={"per_step": "per drafting step", "per_token": "per drafted token",
                 "c_leviathan": "c (draft alone)"})


def parity(root=DEFAULT_ROOT) -> pd.DataFrame:
    """Long table for the parity figure: one row per cell and predictor."""
    cells = draft_cells(root)
    frames = [cells[["depth", "batch", "gamma", "workload", "speedup"]].assign(
        predictor=NAMES[name], predicted=cells[f"pred_{name}"]) for name in PREDICTORS]
    return pd.concat(frames, ignore_index=True).dropna(subset=["predicted"])


def _faster(cells: pd.DataFrame) -> str:
    faster = int((cells["speedup"] > 1).sum())
    return (f"{'None' if faster == 0 else faster} of the {len(cells)} draft cells ran faster "
            "than the target alone")


def _by_depth(cells: pd.DataFrame, column: str) -> str:
    medians = cells.groupby("depth")[column].median()
    return " and ".join(f"{v:.2f} at depth {d}" for d, v in medians.items())


def _cost_findings(n: Numbers, cells: pd.DataFrame, root) -> None:
    lev = cells.groupby("depth")["c_leviathan"].median()
    eng = cells.groupby(["depth", "gamma"])["c_engine"].median()
    larger = int(sum((eng.loc[d] > lev[d]).sum() for d in lev.index))
    n.add(c_leviathan=_by_depth(cells, "c_leviathan"),
          c_engine="; ".join(f"{', '.join(f'{v:.2f} at γ={g}' for g, v in eng.loc[d].items())}"
                             f" at depth {d}" for d in lev.index),
          c_compare=(f"above the draft alone's in {larger} of {len(eng)} depth and γ pairs"
                     if larger else "below the draft alone's in every depth and γ pair"))
    split = cost_split(root)
    b1 = split[split["batch"] == split["batch"].min()]
    n.add(split_batch=int(b1["batch"].iloc[0]) if len(b1) else 1,
          split_sentence=". ".join(
              f"Depth {r.depth} pays {r.per_step:.2f} of a baseline step once per drafting "
              f"step and {r.per_token:.2f} per drafted token, "
              f"{'below' if r.per_token < r.c_leviathan else 'above'} the draft alone's "
              f"{r.c_leviathan:.2f}" for r in b1.itertuples()) or "No depth was measured at two γ")


def _price_findings(n: Numbers, root) -> None:
    """Whether a draft cuts the cost per million tokens, at the planning chapter's
    assumptions (price, SLO, demand)."""
    costs = draft_costs(root)
    cheaper = int((costs["change_pct"] < 0).sum())
    n.add(price_per_replica_hour=PRICE_PER_REPLICA_HOUR, itl_slo_ms=ITL_SLO_MS,
          demand_tokens_per_s=DEMAND_TOKENS_PER_S, price_cases=len(costs),
          price_sentence=(
              f"the best draft costs less per million tokens than the target alone in "
              f"{'none' if cheaper == 0 else cheaper} of the {len(costs)} depth × workload × "
              f"batch cases (median change {costs['change_pct'].median():+.0f} %)"),
          slo_sentence=(
              f"the target alone meets it in {int(costs['off_meets_slo'].sum())} of those cases "
              f"and some drafted γ in {int(costs['draft_meets_slo'].sum())}"))


def _prediction_findings(n: Numbers, root) -> None:
    errors = predictor_errors(root).set_index("predictor")["all cells MAPE %"]
    n.add(**{f"mape_{name}": float(errors[NAMES[name]]) for name in PREDICTORS},
          best_predictor=str(errors.idxmin()))


def _break_even_findings(n: Numbers, root) -> None:
    """Per depth over every host session (γ = the smallest measured, batch 1): where the
    measured per-position α straddles the break-even α, whether it lies between them; where it
    does not, how far it is (a range where sessions differ, so the sentence does not grow)."""
    table = break_even(root)
    line = table[(table["gamma"] == table["gamma"].min()) & (table["batch"] == 1)]
    words = []
    for depth, g in line.groupby("depth"):
        even = g["break_even_engine"].dropna()
        where = f"depth {depth}"
        if even.empty:
            words.append(f"{where}: no α breaks even")
            continue
        low, high = float(even.min()), float(even.max())
        threshold = f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}–{high:.2f}"
        if g["alpha_max"].max() < low:
            words.append(f"{where}: break-even α {threshold}, measured at most "
                         f"{g['alpha_max'].max():.2f}")
        elif g["alpha_min"].min() > high:
            words.append(f"{where}: break-even α {threshold}, measured at least "
                         f"{g['alpha_min'].min():.2f}")
        else:
            words.append(f"{where}: break-even α {threshold} inside the measured "
                         f"{g['alpha_min'].min():.2f}–{g['alpha_max'].max():.2f}")
    n.add(break_even_sentence="; ".join(words))


def _cheaper(change: pd.Series) -> tuple[int, float]:
    """In how many levels an arm cost less per million SLO tokens than speculation off (its
    ``cost_change_pct`` below zero), and the median change in percent (a level where either
    served no qualified token counts as not cheaper)."""
    return int((change < 0).sum()), float(change.median())


def _serving_findings(n: Numbers, root) -> None:
    """Under load (`make serving-drafts`): every draft server against off and n-gram, priced,
    and the memory the engine gave the drafts' layers."""
    levels = draft_serving(root)
    if levels.empty:
        n.add(serving_runs="none", serving_sentence="No draft model was served under load yet "
              "(`make serving-drafts`)", memory_sentence="The draft's memory is read from a "
              "served engine, and none was served yet")
        return
    drafted = levels[levels["drafter"].str.startswith("draft")]
    cheaper, change = _cheaper(drafted["cost_change_pct"])
    ngram = levels.loc[levels["drafter"] == "n-gram", "cost_change_pct"]
    ngram_cheaper, _ = _cheaper(ngram)
    cases = len(drafted)
    verdict = ("less" if cheaper == cases else "more" if cheaper == 0
               else "less at some loads and more at others")
    loads = and_list([str(c) for c in sorted(levels["concurrency"].unique())])
    arms = sorted(drafted["arm"].unique())
    servers = (f"the {arms[0]} server" if len(arms) == 1
               else f"the {len(arms)} draft servers ({and_list(arms)})")
    n.add(serving_runs=sorted(levels["run_id"].unique()),
          serving_sentence=(
              f"Under load ({and_list(sorted(levels['workload'].unique()))} prompts at "
              f"concurrency {loads}), {servers} ran at "
              f"{span(drafted['speedup'], 2)}× the speed of speculation off and cost {verdict} "
              f"per million SLO-qualified tokens than doing nothing (cheaper in {cheaper} of "
              f"{cases} loads, median change {change:+.0f} %); n-gram was cheaper in "
              f"{ngram_cheaper} of {len(ngram)}"))
    _memory_findings(n, root)


def _second_engine_findings(n: Numbers, root) -> None:
    """transformers' assisted generation with the same drafts (batch 1), beside vLLM's."""
    cells = draft_cells(root, engine="transformers")
    if cells.empty:
        n.add(hf_runs="none", hf_sentence="transformers' assisted generation, the second "
              "engine, has not drafted with these drafts yet (`DRAFT_ENGINE=transformers make "
              "measure-drafts`)")
        return
    faster = int((cells["speedup"] > 1).sum())
    n.add(hf_runs=sorted(set(cells["run_id"]) | set(cells["alone_run"].dropna())),
          hf_sentence=(
              f"On the second engine, transformers' assisted generation at batch 1, the same "
              f"drafts ran {'none' if faster == 0 else faster} of the {len(cells)} cells faster "
              f"than the target alone "
              f"(speedups {span(cells['speedup'], 2)}); its counters' acceptance is "
              f"{_by_depth(cells, 'alpha')}, and the draft alone's c is "
              f"{_by_depth(cells, 'c_leviathan')}"))


def _memory_findings(n: Numbers, root) -> None:
    """The KV capacity the drafts' layers took, over every draft server of every run."""
    memory = draft_memory(root)
    if memory.empty:
        n.add(memory_sentence="The served engines reported no KV cache size")
        return
    layers = memory["target_layers"] + memory["depth"]
    predicted = memory["layer_share"]
    as_predicted = bool(memory["as_layer_share"].all())
    if len(memory) == 1:
        m = memory.iloc[0]
        n.add(memory_sentence=(
            f"Read from the engine, the depth-{m.depth} draft's layers took "
            f"{100 * m.kv_capacity_lost:.1f} % of the KV cache's capacity ({m.kv_tokens_off:,} "
            f"tokens in {m.kv_gib:.0f} GiB became {m.kv_tokens_draft:,}), "
            + (f"as its {m.depth} of {int(layers.iloc[0])} layers predict" if as_predicted
               else f"where its {m.depth} of {int(layers.iloc[0])} layers predict "
               f"{100 * predicted.iloc[0]:.1f} %")
            + f". Its weights are {m.draft_weights_mb:.0f} MB beside the target's "
            f"{m.target_weights_mb:.0f} MB"))
        return
    n.add(memory_sentence=(
        f"Read from the engines of {len(memory)} draft servers (depth "
        f"{and_list([str(d) for d in sorted(set(memory['depth']))])}), the drafts' layers took "
        f"{span(100 * memory['kv_capacity_lost'], 1)} % of the KV cache's capacity, "
        + ("in each as the draft's share of the layers predicts" if as_predicted else
           f"where the drafts' shares of the layers predict {span(100 * predicted, 1)} %")
        + f". Their weights are {span(memory['draft_weights_mb'])} MB beside the target's "
        f"{span(memory['target_weights_mb'])} MB"))


def numbers(root=DEFAULT_ROOT) -> Numbers:
    """Everything the draft chapter glues."""
    cells = draft_cells(root)
    if cells.empty:
        raise LookupError(f"{root}: no draft-sweep run: run `make measure-drafts` to measure "
                          "one")
    n = Numbers()
    n.add(runs=sorted(set(cells["run_id"]) | set(cells["alone_run"].dropna())),
          draft_cells=len(cells), sessions=int(cells["host_session"].nunique()),
          depths=" and ".join(str(d) for d in sorted(cells["depth"].unique())),
          workloads=", ".join(sorted(cells["workload"].unique())),
          faster_sentence=_faster(cells),
          speedup_low=float(cells["speedup"].min()), speedup_high=float(cells["speedup"].max()),
          alpha=_by_depth(cells, "alpha"))
    _cost_findings(n, cells, root)
    _prediction_findings(n, root)
    _break_even_findings(n, root)
    _price_findings(n, root)
    _serving_findings(n, root)
    _second_engine_findings(n, root)
    return n
