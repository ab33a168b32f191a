"""The host's step cost, per-prompt lending and the three transfer tiers, on small tables in
the columns sweep_cells and request_predictors write."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbench.derive import step_cost, tiers


def _cell(sku, session, workload, gamma, batch, t_base, divisor, share, c, requests="",
          run=None, dtype="float32"):
    """A cell whose latency is exactly what step cost c gives: pot·D = t_base·(1 + s·c)."""
    pot = t_base * (1 + share * c) / divisor if gamma else t_base
    steps = 100.0
    return {"sku": sku, "host_session": session, "run_id": run or f"sweep-{session}",
            "dtype": dtype, "workload": workload, "gamma": gamma, "batch": batch,
            "temperature": 0.0, "pot_ms": pot, "t_base_ms": t_base,
            "divisor_counters": divisor if gamma else 1.0, "drafting_share": share if gamma else 0,
            "decode_steps": steps, "drafts": share * steps if gamma else 0.0,
            "speedup": t_base / pot, "unstable": False, "requests": requests}


def _host(sku, session, t_base, c, accept):
    """One host session: 'repeat'/'edit' at γ 2 (batch 1 and 4) and one Spec-Bench category
    whose two prompts reach the tokens per step and drafting shares ``accept``."""
    rows = []
    for b in (1, 4):
        rows.append(_cell(sku, session, "repeat", 2, b, t_base, 3.0, 1.0, c[b]))
        rows.append(_cell(sku, session, "edit", 2, b, t_base, 2.4, 0.8, c[b]))
        d = np.mean([a[0] for a in accept])
        s = np.mean([a[1] for a in accept])
        qa = _cell(sku, session, "specbench:qa", 2, b, t_base, d, s, c[b],
                   requests="q1 q2 q3 q4")
        if b == 1:   # the cell's latency averages its requests' latencies
            qa["pot_ms"] = float(np.mean([t_base * (1 + a[1] * c[b]) / a[0] for a in accept]))
            qa["speedup"] = t_base / qa["pot_ms"]
        rows.append(qa)
    requests = [{"sku": sku, "host_session": session, "run_id": f"sweep-{session}",
                 "dtype": "float32", "call": i, "workload": "specbench:qa", "gamma": 2,
                 "batch": 1, "temperature": 0.0, "request": q, "base_ms": t_base,
                 "divisor": a[0], "share": a[1]}
                for i, (q, a) in enumerate(zip(["q1", "q2"], accept, strict=True))]
    return rows, requests


@pytest.fixture
def store():
    accept = [(1.5, 0.4), (2.5, 0.6)]
    a, ra = _host("cpu-amd-epyc-f25m1-1t-float32", "boot-a", 100.0, {1: 0.3, 4: 0.8}, accept)
    b, rb = _host("cpu-amd-epyc-f25m1-1t-float32", "boot-b", 55.0, {1: 0.3, 4: 0.6}, accept)
    z, rz = _host("cpu-amd-epyc-f26m2-1t-float32", "boot-z", 40.0, {1: 0.2, 4: 0.5},
                  [(1.4, 0.4), (2.6, 0.6)])
    return pd.DataFrame(a + b + z), pd.DataFrame(ra + rb + rz)


def test_step_cost_inverts_the_speedup(store):
    cells, _ = store
    host = cells[cells["host_session"] == "boot-a"]
    cost = step_cost.step_costs(host).set_index(["gamma", "batch"])
    assert cost.loc[(2, 1), "c"] == pytest.approx(0.3)
    assert cost.loc[(2, 4), "c"] == pytest.approx(0.8)
    assert cost.loc[(2, 1), "c_cells"] == 2


def test_step_cost_reports_the_verify_part():
    cells = pd.DataFrame([_cell("s", "h", "repeat", 2, 1, 100.0, 3.0, 1.0, 0.3)])
    verify = pd.DataFrame({"batch": [1], "gamma": [2], "delta_ms": [20.0]})
    cost = step_cost.step_costs(cells, verify).iloc[0]
    assert cost["d"] == pytest.approx(0.2) and cost["host_part"] == pytest.approx(0.1)


def test_speedup_is_the_harmonic_mean_over_prompts():
    speedup, d, s = step_cost.speedup([(2.0, 1.0), (1.0, 0.0)], 1.0)
    assert speedup == pytest.approx(1.0)   # 1 and 1 -> 1
    speedup, _, _ = step_cost.speedup([(3.0, 0.5), (1.0, 0.0)], 1.0)
    assert speedup == pytest.approx(2 / (1 / 2.0 + 1 / 1.0))


def test_lending_is_per_prompt_at_batch_1_and_by_question_ids_at_batch_4(store):
    cells, requests = store
    others = cells[cells["host_session"] != "boot-a"]
    lent = step_cost.lend("specbench:qa", 2, 1, ["q1", "q2"], "float32", others,
                          requests[requests["host_session"] != "boot-a"])
    assert lent["lent"].startswith("per prompt (2")
    assert len(lent["per_prompt"]) == 2
    four = step_cost.lend("specbench:qa", 2, 4, ["q4", "q3", "q2", "q1"], "float32", others,
                          requests)
    assert four["lent"] == "cell counters of the same question ids"
    other_ids = step_cost.lend("specbench:qa", 2, 4, ["q9", "q8", "q7", "q6"], "float32",
                               others, requests)
    assert other_ids["lent"].startswith("category pooled")


def test_three_tiers_lend_from_where_they_say(store):
    cells, requests = store
    pred = tiers.tier_predictions(cells, requests)
    a = pred[pred["host_session"] == "boot-a"]
    assert set(a["tier"]) == set(tiers.TIERS)
    # Same host, in-sample: its own counters and its own step cost reproduce the cell.
    same = a[a["tier"] == "same host"]
    assert same["model_err_pct"].abs().max() < 1e-6 and same["ratio_err_pct"].isna().all()
    # Same CPU kind on another host: same acceptance, so only the harmonic mean differs.
    kind = a[a["tier"] == "same CPU kind"]
    assert kind["ratio_err_pct"].notna().all()
    table = tiers.tier_mape(pred)
    assert list(table["tier"].astype(str).unique()) == list(tiers.TIERS)
    assert set(table["batch"]) == {1, 4}


def test_cpu_kind_drops_threads_dtype_and_engine():
    assert tiers.cpu_kind("cpu-amd-epyc-f25m17-2t-bfloat16-hf") == "cpu-amd-epyc-f25m17"
    assert tiers.cpu_kind("cpu-amd-epyc-1t-float32") == "cpu-amd-epyc"
