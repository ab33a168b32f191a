"""Step records (``specbench.engine.step_records``): the counts per token class, the file format
and its reader, the plugin's wrapping of the engine core, and — marked ``engine`` — one real
engine's records against vLLM's own counters and step histogram.

The fixture ``fixtures/step_records/steps-<pid>.jsonl`` is the head (header and four steps) of a
real recording: the engine test's run on a 2-core Zen 4, γ = 2, two prompts of 76 and 97 tokens,
fp32."""
import json
import os
import sys
import types
from pathlib import Path

import pytest

from specbench.engine import step_records
from specbench.engine.step_records import ENV, count_step
from specbench.store import step_records as stored
from specbench.store.step_records import read_step_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def recording(fixtures) -> Path:
    (path,) = (fixtures / "step_records").glob("steps-*.jsonl")
    return path


def test_reads_a_recording(recording):
    steps = read_step_records(recording)
    # The fixture is a version-1 recording: no attention pairs, and no columns for them.
    assert list(steps.columns) == [*stored.VERSION_FIELDS[1], "duration_ns"]
    assert len(steps) >= 3 and list(steps["step"]) == list(range(len(steps)))
    assert (steps.dtypes == "int64").all()
    assert (steps["duration_ns"] == steps["t_end_ns"] - steps["t_start_ns"]).all()
    assert steps.attrs["gamma"] == 2 and steps.attrs["format"] == step_records.FORMAT
    # The engine core took the first request before the second arrived: step 0 prefills one
    # prompt and reads no KV; step 1 decodes that row beside the other's prefill, reading the
    # first prompt; step 2 reads everything the two steps before it computed (no drafts yet).
    first, second, third = (steps.iloc[k] for k in range(3))
    assert (first["rows"], first["decode_tokens"], first["context_tokens"]) == (1, 0, 0)
    assert (second["rows"], second["decode_tokens"]) == (2, 1)
    assert second["context_tokens"] == first["prefill_tokens"]
    assert third["context_tokens"] == steps.loc[:1, ["prefill_tokens", "decode_tokens"]].sum().sum()
    assert (third["decode_tokens"], third["prefill_tokens"]) == (2, 0)


def _damage(recording: Path, tmp_path: Path, line: int, change) -> Path:
    lines = recording.read_text().splitlines()
    lines[line - 1] = change(lines[line - 1])
    damaged = tmp_path / recording.name
    damaged.write_text("\n".join(lines) + "\n")
    return damaged


def _field(name, value):
    return lambda line: json.dumps({**json.loads(line), name: value})


@pytest.mark.parametrize("line, change, says", [
    (3, lambda line: line[:len(line) // 2], "not JSON"),                 # cut short by a kill
    (2, lambda line: json.dumps({k: v for k, v in json.loads(line).items()
                                 if k != "draft_padded"}), "missing draft_padded"),
    (3, _field("prefill_tokens", -1), "prefill_tokens=-1 is not a count"),
    (2, _field("rows", "2"), "rows='2' is not a count"),
    (3, _field("step", 5), "out of order"),
    (2, _field("t_end_ns", 0), "start before end"),
    (1, _field("format", "something-else"), "expected 'specbench-step-records'"),
    (1, lambda line: "", "not JSON"),
])
def test_a_damaged_file_names_the_file_and_the_line(recording, tmp_path, line, change, says):
    damaged = _damage(recording, tmp_path, line, change)
    with pytest.raises(ValueError, match=f"line {line}: ") as caught:
        read_step_records(damaged)
    message = str(caught.value)
    assert message.startswith(f"{damaged}: line {line}: ") and says in message
    assert "\n" not in message


def test_an_empty_file_is_damaged(tmp_path):
    (tmp_path / "steps-1.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"steps-1.jsonl: line 1: empty"):
        read_step_records(tmp_path / "steps-1.jsonl")


# --- counting a SchedulerOutput -----------------------------------------------------------

def _vllm_scheduler_output():
    """A real vLLM ``SchedulerOutput`` of four rows: a new request's 10-token prompt; a decode
    row with two real drafts; a resumed decode row padded with two -1 slots after recomputing
    4 tokens; a cached request still in (chunked) prefill."""
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
    new = NewRequestData(req_id="new", prompt_token_ids=list(range(10)), mm_features=[],
                         sampling_params=None, pooling_params=None, block_ids=([],),
                         num_computed_tokens=0, lora_request=None)
    cached = CachedRequestData(req_ids=["decode", "resumed", "chunk"], resumed_req_ids={"resumed"},
                               new_token_ids=[], all_token_ids={}, new_block_ids=[None] * 3,
                               num_computed_tokens=[20, 30, 100], num_output_tokens=[3, 4, 0])
    scheduled = {"new": 10, "decode": 3, "resumed": 7, "chunk": 50}
    return SchedulerOutput(
        scheduled_new_reqs=[new], scheduled_cached_reqs=cached, num_scheduled_tokens=scheduled,
        total_num_scheduled_tokens=sum(scheduled.values()),
        scheduled_spec_decode_tokens={"decode": [11, 12], "resumed": [-1, -1]},
        scheduled_encoder_inputs={}, finished_req_ids=set(), free_encoder_mm_hashes=[],
        num_spec_tokens_to_schedule=2)


def test_counts_each_token_class_of_a_vllm_scheduler_output():
    pytest.importorskip("vllm")
    out = _vllm_scheduler_output()
    # Pairs: s·c + s(s+1)/2 per row of s scheduled tokens over c computed ones; only the
    # decode row with its two drafts is a decode row (the resumed one recomputes 4 tokens).
    assert count_step(out) == {"rows": 4, "decode_tokens": 2, "draft_tokens": 2,
                               "draft_padded": 2, "prefill_tokens": 10 + 4 + 50,
                               "context_tokens": 0 + 20 + 30 + 100,
                               "decode_pairs": 3 * 20 + 6,
                               "prefill_pairs": 55 + (7 * 30 + 28) + (50 * 100 + 1275)}
    # vLLM's own split (enable_logging_iteration_details): context rows are ours in prefill,
    # and each generation row decodes one token.
    from vllm.v1.utils import compute_iteration_details
    details = compute_iteration_details(out)
    assert details.num_ctx_tokens == 10 + 50
    assert details.num_generation_requests == count_step(out)["decode_tokens"]
    assert details.num_ctx_tokens + details.num_generation_tokens == sum(
        v for k, v in count_step(out).items() if k.endswith(("_tokens", "_padded"))
        and k != "context_tokens")


def test_record_path_puts_the_pid_in_the_name(tmp_path):
    assert step_records.record_path(str(tmp_path), 7) == tmp_path / "steps-7.jsonl"
    assert step_records.record_path(str(tmp_path), 7, 2) == tmp_path / "steps-7-2.jsonl"
    assert step_records.record_path(str(tmp_path / "run.jsonl"), 7) == tmp_path / "run-7.jsonl"


# --- the wrapping, on a stand-in engine core ----------------------------------------------

def _output(scheduled: dict, spec=None, new=(), cached=()):
    """A SchedulerOutput's fields as the plugin reads them (the real class is above)."""
    return types.SimpleNamespace(
        scheduled_new_reqs=[types.SimpleNamespace(req_id=r, num_computed_tokens=c)
                            for r, c in new],
        scheduled_cached_reqs=types.SimpleNamespace(
            req_ids=[r for r, _, _ in cached], num_computed_tokens=[c for _, c, _ in cached],
            num_output_tokens=[o for _, _, o in cached]),
        num_scheduled_tokens=scheduled, total_num_scheduled_tokens=sum(scheduled.values()),
        scheduled_spec_decode_tokens=spec or {}, num_spec_tokens_to_schedule=2)


class _StandInCore:
    """EngineCore's shape as far as the plugin sees it: step() schedules and runs,
    post_step() follows, the scheduler hands out SchedulerOutputs."""

    def __init__(self, outputs):
        queue = list(outputs)
        self.scheduler = types.SimpleNamespace(schedule=lambda *a: queue.pop(0),
                                               has_requests=lambda: bool(queue))
        self.vllm_config = types.SimpleNamespace(speculative_config=types.SimpleNamespace(
            num_speculative_tokens=2, method="ngram"))

    def step(self):
        if not self.scheduler.has_requests():
            return {}, False
        out = self.scheduler.schedule(False)
        return {}, out.total_num_scheduled_tokens > 0

    def post_step(self, model_executed):
        return None


@pytest.fixture
def recorded_core(monkeypatch):
    monkeypatch.setattr(_StandInCore, "step", step_records._wrap_step(_StandInCore.step))
    monkeypatch.setattr(_StandInCore, "post_step",
                        step_records._wrap_post_step(_StandInCore.post_step))
    return _StandInCore


def test_writes_one_flushed_record_per_step_with_work(recorded_core, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "steps"))
    core = recorded_core([
        _output({"a": 5, "b": 7}, new=[("a", 0), ("b", 0)]),
        _output({}),                                                  # nothing scheduled
        _output({"a": 3, "b": 1}, spec={"a": [4, 4]}, cached=[("a", 5, 1), ("b", 7, 1)])])
    for _ in range(4):                                                # the last finds no work
        executed = core.step()[1]
        core.post_step(model_executed=executed)
    # Read while the engine core lives: every finished step is already on disk.
    (path,) = (tmp_path / "steps").glob(f"steps-{os.getpid()}*.jsonl")
    steps = read_step_records(path)
    assert steps[["rows", "decode_tokens", "draft_tokens", "prefill_tokens",
                  "context_tokens"]].values.tolist() == [[2, 0, 0, 12, 0], [2, 2, 2, 0, 12]]
    # A version-2 file: the prompts' pairs (15 + 28), then a's 3 tokens over 5 and b's 1 over 7.
    assert steps[["decode_pairs", "prefill_pairs"]].values.tolist() == [[0, 43], [21 + 8, 0]]
    assert (steps["overhead_ns"] > 0).all() and (steps["duration_ns"] >= 0).all()
    assert steps.attrs["pid"] == os.getpid() and steps.attrs["speculative_method"] == "ngram"


def test_off_the_wrappers_only_pass_through(recorded_core, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    core = recorded_core([_output({"a": 5}, new=[("a", 0)])])
    assert core.step() == ({}, True)
    core.post_step(True)
    assert core._specbench_step_recorder is None and not list(tmp_path.rglob("*.jsonl"))


def test_register_wraps_the_engine_core_once_and_off_not_at_all(monkeypatch, tmp_path):
    pytest.importorskip("vllm")
    from vllm.v1.engine.core import EngineCore
    # The engine's own functions, even if an earlier test in this process wrapped them.
    step = getattr(EngineCore.step, "__specbench_step_records__", EngineCore.step)
    post_step = getattr(EngineCore.post_step, "__specbench_step_records__", EngineCore.post_step)
    monkeypatch.setattr(EngineCore, "step", step)          # restored after the test
    monkeypatch.setattr(EngineCore, "post_step", post_step)
    monkeypatch.delenv(ENV, raising=False)
    step_records.register()
    assert EngineCore.step is step and EngineCore.post_step is post_step
    monkeypatch.setenv(ENV, str(tmp_path))
    step_records.register()
    wrapped = EngineCore.step
    step_records.register()                                 # vLLM may load plugins again
    assert EngineCore.step is wrapped and wrapped.__specbench_step_records__ is step
    assert EngineCore.post_step.__specbench_step_records__ is post_step


# --- the settings and the adapters --------------------------------------------------------

def test_engine_setting_is_off_by_default_and_recorded(tmp_path, monkeypatch):
    from specbench.engine import vllm_engine as engine
    off = engine.EngineSettings(model=str(tmp_path))
    assert off.step_records is None and off.manifest_fields()["step_records"] is None
    on = engine.EngineSettings(model=str(tmp_path), step_records=str(tmp_path / "steps"))
    assert on.manifest_fields()["step_records"]["format"] == step_records.FORMAT
    monkeypatch.setattr(engine, "on_gpu", lambda: True)
    with pytest.raises(ValueError, match="step_with_batch_queue"):
        engine.EngineSettings(model=str(tmp_path), step_records="x",
                              async_scheduling=True).validate()


def test_the_adapters_set_the_environment_before_vllm_starts(tmp_path, monkeypatch):
    from specbench.engine import lifeline
    from specbench.engine import vllm_engine as engine
    from specbench.measure.serving.server import Server
    seen = []

    class StandInLLM:
        def __init__(self, **kwargs):
            seen.append(os.environ.get(ENV))

        def get_tokenizer(self):
            return None

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=StandInLLM))
    monkeypatch.setattr(engine, "on_gpu", lambda: False)
    monkeypatch.setattr(lifeline, "register", lambda: None)
    monkeypatch.setenv(lifeline.ENV, str(os.getpid()))
    calls = []
    monkeypatch.setattr(step_records, "register", lambda: calls.append(os.environ.get(ENV)))
    monkeypatch.setattr(step_records, "check_loadable", lambda: None)
    monkeypatch.setenv(ENV, "stale")
    place = str(tmp_path / "steps")
    engine.Engine(engine.EngineSettings(model=str(tmp_path), step_records=place))
    engine.Engine(engine.EngineSettings(model=str(tmp_path)))
    assert seen == [place, None] and calls == [place, None]
    monkeypatch.setenv(ENV, "stale")
    assert ENV not in Server(engine.EngineSettings(model=str(tmp_path)), port=1).env()
    server = Server(engine.EngineSettings(model=str(tmp_path), step_records=place), port=1)
    assert server.env()[ENV] == place


def test_the_plugin_is_declared_and_installed():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'specbench-step-records = "{step_records.ENTRY_POINT}"' in text
    step_records.check_loadable()


# --- the real engine ----------------------------------------------------------------------

# Repetitive texts, so that n-gram speculation finds drafts from the first decode step.
TEXTS = ("The cat sat on the mat, and the dog sat on the log. " * 5,
         "One, two, three, four; one, two, three, four. " * 6)


@pytest.mark.engine
def test_a_real_engine_records_every_step(tmp_path):
    """γ = 2, two prompts, 16 tokens each, fp32: one record per engine step (vLLM's step
    histogram), the prompts' tokens prefilled once, every draft vLLM counted, and the tokens
    the requests received explained by decode rows and accepted drafts."""
    pytest.importorskip("vllm")
    from specbench.engine.assets import embedded_model_dir
    from specbench.engine.vllm_engine import Engine, EngineSettings
    gamma, place = 2, tmp_path / "steps"
    settings = EngineSettings(model=str(embedded_model_dir()), gamma=gamma, dtype="float32",
                              step_records=str(place))
    with Engine(settings) as engine:
        prompts = [engine.tokenizer.encode(text) for text in TEXTS]
        gen = engine.generate(prompts, max_tokens=16)
    (path,) = place.glob("steps-*.jsonl")
    steps = read_step_records(path)
    print(steps.to_string(), f"\niterations {gen.iterations}, counters {gen.counters}, "
          f"outputs {gen.output_tokens}, prompts {[len(p) for p in prompts]}")
    prompt_tokens = sum(len(p) for p in prompts)
    assert steps.attrs["pid"] != os.getpid() and steps.attrs["gamma"] == gamma
    assert len(steps) == gen.iterations
    # The engine core may take the first request before the second arrives, so step 0
    # prefills one prompt or both; it reads no KV and decodes nothing.
    first = steps.iloc[0]
    assert (first["decode_tokens"], first["context_tokens"]) == (0, 0)
    assert first["prefill_tokens"] in {*map(len, prompts), prompt_tokens}
    assert steps["prefill_tokens"].sum() == prompt_tokens
    both_decoding = steps[steps["decode_tokens"] == len(prompts)]
    assert len(both_decoding) and (both_decoding["context_tokens"] >= prompt_tokens).all()
    assert (steps["draft_tokens"] + steps["draft_padded"]).sum() == gen.counters.draft_tokens
    assert steps["draft_tokens"].sum() > 0 and (steps["gamma"] == gamma).all()
    # Each request's first token comes from its prefill, each later one from a decode row or
    # an accepted draft; the last step may overshoot max_tokens by up to γ per request.
    overshoot = (len(prompts) + steps["decode_tokens"].sum() + gen.counters.accepted_tokens
                 - sum(gen.output_tokens))
    assert 0 <= overshoot <= gamma * len(prompts)
    assert (steps["t_start_ns"].values[1:] >= steps["t_end_ns"].values[:-1]).all()
    share = steps["overhead_ns"].sum() / steps["duration_ns"].sum()
    print(f"recording overhead {share:.2e} of step time, median step "
          f"{steps['duration_ns'].median() / 1e6:.1f} ms")
    assert share <= 0.01


def test_the_writer_and_the_reader_name_one_format():
    from specbench.engine import step_records as written
    assert (written.FORMAT, written.VERSION, written.FIELDS) == (
        stored.FORMAT, stored.VERSION, stored.FIELDS)
