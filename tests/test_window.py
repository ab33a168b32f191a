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
