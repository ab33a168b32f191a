"""The load predicted through vLLM's own scheduler (specbench.engine.scheduler_sim,
specbench.measure.load_prediction): what the scheduler puts in each step, the acceptance drawn
from the counters, levels it cannot hold, the schedule from the running batch and the one γ
rule. The scheduler runs in-process without a model (no engine starts; the embedded model's
config is read)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbench.engine import scheduler_sim as sim
from specbench.measure import load_prediction as load

OUT = 16


@pytest.fixture(scope="module")
def model() -> str:
    from specbench.engine.assets import embedded_model_dir
    return str(embedded_model_dir())


@pytest.fixture(scope="module")
def config(model):
    return lambda gamma, schedule=None, seqs=8: sim.scheduler_config(
        model, "float32", gamma, schedule, {"max_num_seqs": seqs, "max_model_len": 2048})


def profiles(n, start=0.0, lengths=(1.0,), prompt=100):
    return [sim.DraftProfile(prompt + i, start, tuple(lengths)) for i in range(n)]


def test_off_closed_loop_holds_concurrency_and_emits_every_token(config):
    cfg = config(0)
    run = sim.simulate_closed_loop(cfg, sim.kv_blocks(cfg, 1), profiles(6), 2, OUT)
    steps, req = run.steps, run.requests
    assert (req["output_tokens"] == OUT).all()
    assert steps["rows"].max() == 2 and steps["draft_tokens"].sum() == 0
    # the idle engine wakes on the first arrival; the second joins the next step, beside the
    # first one's decode (as the servers' step records show)
    assert steps.loc[0, "prefill_tokens"] == 100 and steps.loc[0, "rows"] == 1
    assert steps.loc[1, "prefill_tokens"] == 101 and steps.loc[1, "decode_tokens"] == 1
    # the next request is sent when one finishes, during the next step, and is scheduled in
    # the step after it
    first_done = req.loc[:1, "finish_step"].min()
    assert req.loc[2, "arrival_step"] == first_done + 1
    assert req.loc[2, "first_step"] >= first_done + 2
    assert (req["first_step"] <= req["finish_step"]).all()


def test_full_acceptance_emits_gamma_plus_one_per_drafting_step(config):
    cfg = config(4)
    run = sim.simulate_closed_loop(cfg, sim.kv_blocks(cfg, 1),
                                   profiles(1, start=1.0, lengths=(0, 0, 0, 0, 1.0)), 1, OUT)
    # the prefill step emits one token and proposes; each later step verifies 4 drafts and
    # accepts all of them
    assert run.requests.loc[0, "output_tokens"] == OUT
    assert (run.steps["draft_tokens"].iloc[1:] == 4).all()
    assert len(run.steps) == 1 + -(-(OUT - 1) // 5)


def test_a_dynamic_schedule_is_looked_up_by_the_requests_in_the_step(config):
    cfg = config(4, [[1, 1, 4], [2, 8, 0]])
    run = sim.simulate_closed_loop(cfg, sim.kv_blocks(cfg, 1),
                                   profiles(3, start=1.0, lengths=(0, 0, 0, 0, 1.0)), 2, OUT)
    steps = run.steps          # two requests side by side, then the third alone
    assert set(steps.loc[steps["rows"] == 2, "gamma"]) == {0}
    assert set(steps.loc[steps["rows"] == 1, "gamma"]) == {4}
    assert steps.loc[steps["rows"] == 1, "draft_tokens"].max() == 4


def test_a_level_beyond_max_num_seqs_is_named_not_simulated(config):
    cfg = config(0, seqs=2)
    with pytest.raises(sim.LoadNotHeld, match="concurrency 4 exceeds max_num_seqs=2"):
        sim.simulate_closed_loop(cfg, sim.kv_blocks(cfg, 1), profiles(4), 4, OUT)


def test_a_level_beyond_the_kv_cache_is_named(config):
    cfg = config(0)
    with pytest.raises(sim.LoadNotHeld, match="KV blocks"):
        sim.check_held(cfg, 3, 8, 1000, OUT)


def test_profiles_read_acceptance_from_the_counters():
    rows = pd.DataFrame([{"gamma": 2, "drafts": 10, "accepted_per_pos": "6;3",
                          "decode_steps": 40}])
    [p] = load.draft_profiles(rows, [50])
    assert p.start == pytest.approx(0.25)
    assert p.lengths == pytest.approx((0.4, 0.3, 0.3))     # L = 0, 1, 2 of the 10 drafts


def test_level_times_follow_the_steps():
    steps = pd.DataFrame({"rows": [1, 1, 1, 1]})
    req = pd.DataFrame({"first_step": [0], "finish_step": [3], "arrival_step": [0],
                        "output_tokens": [4]})
    out = load.level_times(sim.SimulatedLoad(steps, req), np.array([0.5, 0.1, 0.1, 0.1]))
    assert out["tpot_ms"] == pytest.approx(100)
    assert out["ttft_ms"] == pytest.approx(500)
    assert out["mean_running"] == pytest.approx(1)


def test_the_schedule_comes_from_the_running_batch():
    best = [{"gamma": 6, "running_batch": 1.0}, {"gamma": 6, "running_batch": 2.0},
            {"gamma": 0, "running_batch": 3.9}, {"gamma": 2, "running_batch": 6.95}]
    assert load.schedule_from_running(best, 8) == [[1, 2, 6], [3, 5, 0], [6, 8, 2]]
    assert load.schedule_from_running([{"gamma": 0, "running_batch": 1.0}], 8) is None


def test_static_gamma_goes_through_the_one_rule():
    def arm(g, c, t):
        return {"arm": "off" if g == 0 else f"γ={g}", "gamma": g, "concurrency": c,
                "held": True, "tpot_ms": t}
    loaded = {"levels": [1, 8], "arms": [arm(0, 1, 50), arm(0, 8, 100), arm(2, 1, 40),
                                         arm(2, 8, 110), arm(4, 1, 45), arm(4, 8, 130)]}
    assert load.static_gamma(loaded) == 2
    loaded["arms"][3]["tpot_ms"] = 130
    assert load.static_gamma(loaded) == 0      # 40·130 > 50·100: off
