"""The decode window: batch-N latency without other requests' prefill."""
import math

import pytest

from specbench.measure.window import decode_window


def test_batch_one_window_is_the_first_to_last_token_span():
    # prefill step (first token at 0.5 s), then 4 decode steps of 0.1 s, 2 tokens each
    times = [0.5, 0.6, 0.7, 0.8, 0.9]
    counts = [[1], [3], [5], [7], [9]]
    w = decode_window(times, counts)
    assert w.tokens == (8,) and w.steps == 4 and w.overlap_s == 0
    assert w.pot_s()[0] == pytest.approx((0.9 - 0.5) / (9 - 1))   # decode_s / (n − 1)
    assert w.tokens_per_step() == [2.0]


def test_staggered_prefill_is_left_out():
    # Request 0 finishes prefill at step 0 and decodes alone (slowly: the others' prefill
    # shares its steps) until step 3, where request 1 emits its first token.
    times = [1.0, 2.0, 3.0, 4.0, 4.1, 4.2, 4.3, 4.4]
    counts = [[1, 0], [2, 0], [3, 0], [4, 1], [5, 2], [6, 3], [7, 4], [8, 5]]
    w = decode_window(times, counts)
    assert (w.start_s, w.end_s, w.steps) == (4.0, 4.4, 4)
    assert w.tokens == (4, 4) and w.overlap_s == 3.0
    # Timed over its own span, request 0 would show (4.4 − 1.0)/7 ≈ 0.49 s per token:
    assert w.pot_s() == [pytest.approx(0.1), pytest.approx(0.1)]


def test_a_request_that_ends_before_another_starts_leaves_no_window():
    times = [1.0, 2.0, 3.0]
    counts = [[1, 0], [2, 0], [2, 1]]
    w = decode_window(times, counts)
    assert w.empty and all(math.isnan(p) for p in w.pot_s())


def test_a_malformed_timeline_is_refused():
    with pytest.raises(ValueError):
        decode_window([1.0], [])


def test_a_batched_sweep_cell_is_timed_inside_its_decode_window(tmp_path, monkeypatch):
    """A stand-in engine whose requests finish prefill at staggered times: the batch-2 cell's
    latency is the pure decode step, the batch-1 cell keeps its first-to-last-token span, and
    the windows are recorded per request row."""
    import standin_sweep
    from specbench.measure import sweep
    standin_sweep.install(monkeypatch)
    monkeypatch.setattr(standin_sweep.StandInEngine, "staggered", True)
    model = standin_sweep.model_folder(tmp_path / "model")
    cfg = sweep.SweepConfig(model=str(model), gammas=(0, 2), batches=(1, 2), reps=3, warmup=0,
                            workloads=("repeat",),
                            prompts=2, max_tokens=20, root=str(tmp_path / "runs"))
    run = sweep.run_sweep(cfg, progress=False)
    cells = run.table("cells.csv").set_index(["gamma", "batch"])
    assert cells.loc[(2, 2), "pot_ms"] == pytest.approx(100.0)       # 0.1 s decode steps only
    assert cells.loc[(2, 2), "overlap_removed"] and cells.loc[(2, 2), "overlap_ms"] > 0
    assert cells.loc[(2, 2), "window_divisor"] == pytest.approx(1.0)
    # Batch 1: no other request, the same definition as before — (last − first)/(n − 1).
    assert cells.loc[(2, 1), "pot_ms"] == pytest.approx(100.0)
    requests = run.table("requests.csv")
    batched = requests[requests["batch"] == 2]
    assert (batched["window_steps"] == 20 - 2).all() and (batched["window_tokens"] == 18).all()
    # Timed over its own span, the first request would carry the second one's prefill:
    own_span_ms = 1e3 * (0.5 + 18 * 0.1) / 19
    assert own_span_ms > 1.2 * cells.loc[(2, 2), "pot_ms"]
