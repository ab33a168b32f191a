"""The headline model and leave-one-SKU-out: hand-computed values, and perturbations that
prove no cell's own timing (or a held-out SKU's own counters) enters its prediction."""
import numpy as np
import pandas as pd
import pytest

from specbench.theory.errors import mape_interval
from specbench.theory.predict import add_predictions, fit_host_ratio
from specbench.derive.transfer import leave_one_sku_out


def _cells(noise=1.02):
    rows = []
    for sku, t_base in (("a", 20.0), ("b", 30.0), ("c", 25.0)):
        for w, alpha, share in (("repeat", 1.0, 1.0), ("open", 0.0, 0.1), ("edit", 0.8, 0.8)):
            for g in (2, 4):
                divisor = 1 + share * alpha * g
                pot = t_base * (1 + share * 0.1 * g) / divisor * (noise if sku == "b" else 1.0)
                rows.append({"sku": sku, "workload": w, "gamma": g, "batch": 1,
                             "temperature": 0.0, "pot_ms": pot, "t_base_ms": t_base,
                             "alpha": alpha, "divisor_counters": divisor,
                             "drafting_share": share, "d_micro": 0.1 * g, "d_roofline": 0.05,
                             "decode_steps": 100, "drafts": 100 * share,
                             "draft_tokens": 100 * share * g,
                             "accepted_tokens": 100 * share * g * alpha,
                             "speedup": t_base / pot})
    return pd.DataFrame(rows)


def test_hand_computed_headline():
    # t_base 20, d 0.4 (γ=4), share 0.5, divisor 2, h = 0 (no other workload has a residual):
    # (20·(1 + 0.5·0.4)) / 2 = 12
    c = pd.DataFrame([{"sku": "a", "workload": "w", "gamma": 4, "batch": 1,
                       "temperature": 0.0, "pot_ms": 11.0, "t_base_ms": 20.0, "alpha": 0.25,
                       "divisor_counters": 2.0, "drafting_share": 0.5, "d_micro": 0.4,
                       "d_roofline": np.nan}])
    out = add_predictions(c).iloc[0]
    assert out["model_pot_ms"] == pytest.approx(12.0)
    assert np.isnan(out["pred_eq1_ms"])       # no roofline: no eq. 1, never a silent d = 0
    assert out["pred_blind_ms"] == pytest.approx(4.0)
    assert out["d_source"] == "microbenchmark"


def test_host_ratio_is_recovered_from_residuals():
    c = _cells()
    c["d"] = c["d_micro"]
    c = c[c["sku"] == "a"].copy()
    c["pot_ms"] = (c["t_base_ms"] * (1 + c["drafting_share"] * (c["d"] + 0.05))
                   / c["divisor_counters"])
    assert fit_host_ratio(c) == pytest.approx(0.05)


def test_a_cells_own_latency_never_moves_its_prediction():
    c = _cells()
    before = add_predictions(c)
    hit = (c["sku"] == "a") & (c["workload"] == "edit") & (c["gamma"] == 4)
    c.loc[hit, "pot_ms"] *= 1.5
    after = add_predictions(c)
    assert (after.loc[hit, "model_pot_ms"].item()
            == pytest.approx(before.loc[hit, "model_pot_ms"].item()))


def test_a_held_out_skus_counters_never_move_its_predictions():
    c = _cells()
    before = leave_one_sku_out(c).set_index(["sku", "workload", "gamma", "batch"])
    mine = c["sku"] == "b"
    c.loc[mine, ["accepted_tokens", "drafts"]] *= 0.3
    c.loc[mine, "divisor_counters"] = 1.01
    c.loc[mine, "pot_ms"] *= 2
    after = leave_one_sku_out(c).set_index(["sku", "workload", "gamma", "batch"])
    b = before.loc["b"]
    assert np.allclose(after.loc["b", "model_pot_ms"], b["model_pot_ms"])
    assert np.allclose(after.loc["b", "ratio_pot_ms"], b["ratio_pot_ms"])
    # …while the other SKUs, which learn from b, do move
    assert not np.allclose(after.loc["a", "model_pot_ms"], before.loc["a", "model_pot_ms"])


def test_transfer_is_exact_when_the_model_holds():
    t = leave_one_sku_out(_cells(noise=1.0))
    assert t["model_err_pct"].abs().max() < 1e-9


def test_mape_interval_brackets_the_mean():
    mape, lo, hi = mape_interval(pd.Series([1.0, -2.0, 3.0, 4.0]))
    assert mape == 2.5 and lo <= mape <= hi


def _requests(c: pd.DataFrame) -> pd.DataFrame:
    """Two prompts per batch-1 cell: 'q1' drafts like the cell, 'q2' never; both SKUs ran both."""
    rows = []
    for r in c.itertuples():
        for q, share, divisor in (("q1", r.drafting_share, r.divisor_counters), ("q2", 0.0, 1.0)):
            rows.append({"sku": r.sku, "workload": r.workload, "gamma": r.gamma, "batch": 1,
                         "temperature": 0.0, "request": q, "base_ms": r.t_base_ms,
                         "divisor": divisor, "share": share})
    return pd.DataFrame(rows)


def test_per_prompt_transfer_predicts_each_request_from_the_same_prompt_elsewhere():
    c = _cells(noise=1.0)
    requests = _requests(c)
    t = leave_one_sku_out(c, requests).set_index(["sku", "workload", "gamma", "batch"])
    row = t.loc[("a", "edit", 4, 1)]
    assert row["per_prompt"]
    # q1: (20 + 0.8·(0.4·20 + h·20)) / 4.2 with h = 0 (the model holds exactly); q2: 20 / 1
    q1 = (20 + 0.8 * (0.4 * 20)) / (1 + 0.8 * 0.8 * 4)
    assert row["model_pot_ms"] == pytest.approx((q1 + 20.0) / 2)


def test_per_prompt_transfer_never_reads_the_held_out_prompts_counters():
    c = _cells(noise=1.0)
    requests = _requests(c)
    before = leave_one_sku_out(c, requests).set_index(["sku", "workload", "gamma", "batch"])
    mine = requests["sku"] == "a"
    requests.loc[mine, ["divisor", "share"]] = [9.0, 0.01]
    after = leave_one_sku_out(c, requests).set_index(["sku", "workload", "gamma", "batch"])
    assert np.allclose(after.loc["a", "model_pot_ms"], before.loc["a", "model_pot_ms"])
