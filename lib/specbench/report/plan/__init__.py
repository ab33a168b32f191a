"""The operator's answer: which γ to run, what it saves, what it costs — from numbers or runs.

Two ways in, one rule out:

* **explicit numbers** (:func:`plan_explicit`): a baseline step t_base, one acceptance α and the
  verify overhead d(γ) of every candidate γ give eq. 1's per-token latency
  pot(γ) = (t_base·(1 + d(γ)) + h) / (αγ + 1), h only for γ > 0;
* **measured runs** (:func:`plan_from_runs`): the SKU's latest speculative sweep
  (:func:`plan_basis`) supplies t_base (its γ=0
  cell), the counter α and the exact divisor (tokens per step from counters), the model
  supplies d(γ) and the per-cycle host term h — all through :func:`model_inputs`, the one
  place where the model's inputs are chosen.

The recommendation (:func:`recommend`) is the γ with the lowest predicted pot; speculation is
off (γ = 0) unless some γ is strictly faster than t_base, and a tie goes to the smaller γ.

The rest turns measurements into the economics worksheet's terms: verification overhead v and
break-even acceptance (:func:`break_even_table`), per-position acceptance from the counters
(:func:`per_position_acceptance`), whole-replica cost per million SLO-qualified tokens
(:func:`priced`), hypothetical draft-model KV capacity (:func:`hypothetical_draft_kv`), the
cells where speculation did not pay (:func:`negative_cells`), and the planning chapter's named
numbers (:mod:`specbench.report.chapters.planning`).
"""
from specbench.report.plan.acceptance import *  # noqa: F403 - each module's __all__
from specbench.report.plan.regret import *  # noqa: F403 - each module's __all__
from specbench.report.plan.from_runs import *  # noqa: F403 - each module's __all__
from specbench.report.plan.gamma import *  # noqa: F403 - each module's __all__
from specbench.report.plan.negative import *  # noqa: F403 - each module's __all__
from specbench.report.plan.worksheet import *  # noqa: F403 - each module's __all__
