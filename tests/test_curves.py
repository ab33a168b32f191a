"""Derived series (specbench.report.curves) against hand-computed cases and perturbations."""
import numpy as np
import pandas as pd
import pytest

from specbench.report import curves
from specbench.theory.counters import DecodeTally, SpecCounters


def _cell(**kw):
    base = {"sku": "s", "sku_label": "S", "run_id": "r", "workload": "repeat", "batch": 1,
            "gamma": 4, "alpha": 1.0, "pot_ms": 10.0, "t_base_ms": 40.0, "d": 0.1,
            "emitted_per_step": 5.0, "speedup": 4.0, "pred_eq1_ms": 8.8, "pred_blind_ms": 8.0}
    return {**base, **kw}


def test_cycle_cost_uses_the_measured_divisor():
    # 10 ms per token × 5 tokens per step = 50 ms a step = 1.25 × t_base (40 ms);
    # the roofline charges 1.1 × 40 = 44 ms, so 6 ms are left over.
    c = curves.cycle_costs(pd.DataFrame([_cell()])).iloc[0]
    assert c["measured_cost"] == pytest.approx(1.25)
    assert c["roofline_cost"] == pytest.approx(1.1)
    assert c["residual_exact_ms"] == pytest.approx(6.0)


def test_shortfall_parts_by_hand():
    # α=1, γ=4: ideal 5. d=0.25 costs 5 − 5/1.25 = 1; measured 3 leaves a residual of 1.
    parts = curves.shortfall_split(pd.DataFrame([_cell(d=0.25, speedup=3.0)]))
    assert parts.set_index("part")["value"].to_dict() == pytest.approx(
        {"1 measured speedup": 3.0, "2 verify cost d(γ)": 1.0, "3 residual": 1.0})


def test_error_ablation_by_hand():
    # t_base 30, α .5, γ 2, d .5, measured 20: eq. 1 = 30·1.5/2 = 22.5 (+12.5 %);
    # d = 0 gives 15 (−25 %); the blind model 30/3 = 10 (−50 %).
    c = _cell(t_base_ms=30.0, alpha=0.5, gamma=2, d=0.5, pot_ms=20.0, pred_eq1_ms=22.5,
              pred_blind_ms=10.0)
    a = curves.error_ablation(pd.DataFrame([c])).iloc[0]
    assert (a["eq1_abs_pct"], a["eq1_d0_abs_pct"], a["blind_abs_pct"]) == pytest.approx(
        (12.5, 25.0, 50.0))


def test_eq1_curves_do_not_move_when_the_measured_latency_does():
    cells = pd.DataFrame([_cell(gamma=0, alpha=0.0, d=0.0, pot_ms=40.0),
                          _cell(gamma=2, alpha=0.9, d=0.05, pot_ms=15.0),
                          _cell(gamma=4, alpha=0.9, d=0.1, pot_ms=10.0)])
    before = curves.eq1_curves(cells)
    cells.loc[cells["gamma"] > 0, "pot_ms"] *= 3
    pd.testing.assert_frame_equal(before, curves.eq1_curves(cells))
    # At γ=0 eq. 1 is t_base itself; at γ=4 it is 40·1.1/(0.9·4+1).
    assert before["pot_ms"].iloc[0] == pytest.approx(40.0)
    at4 = before[np.isclose(before["gamma"], 4.0)]["pot_ms"].iloc[0]
    assert at4 == pytest.approx(40 * 1.1 / 4.6)


def _reps(drafts, draft_tokens, accepted, output_tokens=11, gamma=4):
    return pd.DataFrame([{"workload": "repeat", "gamma": gamma, "batch": 1, "rep": i,
                          "drafts": drafts, "draft_tokens": draft_tokens,
                          "accepted_tokens": accepted, "output_tokens": output_tokens}
                         for i in range(2)])


def test_step_counts_by_hand():
    # Two requests of 10 decoded tokens, 6 accepted drafts in 3 drafting steps each:
    # 20 decoded − 12 accepted = 8 steps, 6 of which drafted; 20/8 = 2.5 tokens a step.
    row = curves.step_counts(_reps(3, 12, 6)).iloc[0]
    assert (row["decode_steps"], row["drafting_steps"], row["short_drafts"]) == (8, 6, 0)
    assert row["drafting_share"] == pytest.approx(0.75)
    assert row["emitted_per_step"] == pytest.approx(2.5)


def test_the_no_draft_path():
    """A decode in which the proposer never found a match: α = 0, length 1, one token a
    step — the same convention from the counters type, the step counts and the divisor."""
    tally = DecodeTally(SpecCounters(0, 0, 0), decoded_tokens=127)
    assert (tally.alpha, tally.mean_acceptance_length) == (0.0, 1.0)
    assert tally.decode_steps == 127 and tally.emitted_per_step == 1.0
    row = curves.step_counts(_reps(0, 0, 0, output_tokens=128)).iloc[0]
    assert row["drafting_share"] == 0.0 and row["emitted_per_step"] == 1.0
    with pytest.raises(ValueError, match="decoded_tokens"):
        DecodeTally(SpecCounters(0, 0, 0), decoded_tokens=-1)


def test_drafts_cut_off_by_max_tokens_still_count_as_steps():
    # 3 drafting steps accepted 12 drafts but only 10 tokens were kept: still ≥ 3 steps.
    tally = DecodeTally(SpecCounters(3, 12, 12), decoded_tokens=10)
    assert tally.decode_steps == 3 and tally.emitted_per_step == pytest.approx(10 / 3)
