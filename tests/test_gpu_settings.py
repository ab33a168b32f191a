"""The engine's execution mode on a GPU: async scheduling pinned off for every arm, graph mode
a parameter, both in the kwargs vLLM receives and in the manifest; base checkpoints' prompts.
No engine starts: vLLM's ``LLM`` is replaced where a test needs one, and only the settings
handed to it are checked (kwarg names are checked against the installed vLLM's sources)."""
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from specbench.cli import main as cli

from specbench.measure import contract

from specbench.engine import vllm_engine as engine

from specbench.measure import sweep
from specbench.engine.vllm_engine import EngineSettings

ARMS = (0, 2, 4, 6)


@pytest.mark.parametrize("gamma", ARMS)
def test_every_arm_pins_async_scheduling_off_and_runs_eager_by_default(gamma):
    kwargs = EngineSettings(model="org/name", gamma=gamma).llm_kwargs()
    assert kwargs["async_scheduling"] is False and kwargs["enforce_eager"] is True
    if gamma:
        assert kwargs["speculative_config"]["method"] == "ngram"
        assert kwargs["speculative_config"]["num_speculative_tokens"] == gamma
    else:   # the baseline arm runs without any speculative config
        assert "speculative_config" not in kwargs
    graphs = EngineSettings(model="org/name", gamma=gamma, enforce_eager=False).llm_kwargs()
    assert graphs["enforce_eager"] is False and graphs["async_scheduling"] is False


def test_optional_gpu_arm_is_ngram_gpu_with_async():
    kwargs = EngineSettings(model="org/name", gamma=4, async_scheduling=True,
                            speculative_method="ngram_gpu").llm_kwargs()
    assert kwargs["async_scheduling"] is True
    assert kwargs["speculative_config"]["method"] == "ngram_gpu"


def _vllm_source(relative: str) -> str:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed")
    return (Path(list(spec.submodule_search_locations)[0]) / relative).read_text()


def test_kwarg_names_exist_in_the_installed_vllm():
    # Read, not imported (importing vLLM takes seconds): EngineArgs declares each field.
    args = _vllm_source("engine/arg_utils.py")
    for name in EngineSettings(model="org/name", gamma=2).llm_kwargs():
        assert f"\n    {name}:" in args, f"EngineArgs has no field {name!r}"
    assert 'NgramGPUTypes = Literal["ngram_gpu"]' in _vllm_source("config/speculative.py")


def test_engine_hands_the_settings_to_vllm_without_touching_torch_cuda(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")

    class Boom(types.ModuleType):
        def __getattr__(self, name):
            raise AssertionError(f"torch.cuda.{name} touched before vLLM starts")

    monkeypatch.setattr(torch, "cuda", Boom("torch.cuda"))
    seen = {}

    class StandInLLM:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def get_tokenizer(self):
            return None

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=StandInLLM))
    monkeypatch.setenv("PATH", str(tmp_path))       # no nvidia-smi: the CPU branch
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")   # restored after the test
    eng = engine.Engine(EngineSettings(model="org/name", gamma=2))
    assert seen["async_scheduling"] is False and seen["enforce_eager"] is True
    assert eng.prompt_format == engine.CHAT_TEMPLATE
    eng.llm = None


def test_manifest_records_async_and_graph_mode(monkeypatch, tmp_path):
    monkeypatch.setattr(contract, "roofline_sku", lambda hw, threads, dtype: {
        "name": "cpu-test", "peak_flops": 1e11, "bandwidth": 2e10, "source": "test"})
    m = contract.contract("sweep", str(tmp_path), "bfloat16", enforce_eager=False)
    assert m["engine"]["async_scheduling"] is False
    assert m["engine"]["settings"]["async_scheduling"] is False
    assert m["engine"]["enforce_eager"] is False and "CUDA graphs" in m["engine"]["graph_mode"]
    assert m["engine"]["speculative_method"] == "ngram"
    assert m["roofline"].startswith("no roofline: model shape unknown")   # no config.json
    # Every new run names the host and boot that measured it (store.hosts groups by them).
    assert m["host"]["boot_id"] and m["host"]["host_id"]


def test_sweep_config_carries_graph_mode_to_engines_and_manifest(monkeypatch, tmp_path):
    monkeypatch.setattr(sweep, "contract", lambda kind, model, dtype: {
        "kind": kind, "sku": "cpu-test-1t-bfloat16", "code": {"revision": "x"},
        "model": {"name": "m", "path": model, "weights_sha256": "a", "tokenizer_sha256": "b"},
        "engine": {"name": "stand-in", "version": "0", "settings": {}}, "hardware": {},
        "dtype": dtype})
    cfg = sweep.SweepConfig(model=str(tmp_path), enforce_eager=False)
    m = sweep._manifest(cfg, str(tmp_path))
    assert m["engine"]["enforce_eager"] is False and m["engine"]["async_scheduling"] is False
    assert m["engine"]["settings"]["enforce_eager"] is False
    m.update(load={"max_load": 2.0})
    again = sweep.SweepConfig.from_manifest(m)            # a resumed run keeps its mode
    assert again.enforce_eager is False and again.speculative_method == "ngram"


def test_cli_graph_mode_flag():
    parser = cli.argparse.ArgumentParser()
    cli._sweep_args(parser)
    assert cli.config_from_args(parser.parse_args([])).enforce_eager is True
    cfg = cli.config_from_args(parser.parse_args(["--cuda-graphs"]))
    assert cfg.enforce_eager is False and cfg.async_scheduling is False
    assert cli.config_from_args(parser.parse_args(["--graph-mode"])).enforce_eager is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--speculative-method", "eagle"])


def test_base_checkpoint_prompt_is_a_plain_concatenation_with_a_note():
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["Hello", "there", "Repeat", "this", "\n"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words + ["[UNK]"])},
                                     unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    base = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    assert base.chat_template is None
    notes = []
    messages = [{"role": "user", "content": "Hello there"},
                {"role": "assistant", "content": "Repeat this"}]
    ids = engine.encode_messages(base, messages, notes)
    assert ids == base.encode("Hello there\n\nRepeat this")
    assert notes == [engine.PLAIN_PROMPT]

    class Broken:
        def apply_chat_template(self, *a, **k):
            raise ValueError("some other template failure")

    with pytest.raises(ValueError, match="other template failure"):
        engine.encode_messages(Broken(), messages, [])
