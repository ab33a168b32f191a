"""Layer-truncated drafts: built once, keyed by source hash and depth, refused when they do not
match their key, and a depth out of range is one line and exit 2 on the command line."""
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from specbench.cli.main import main
from specbench.engine.drafts import DraftError, build_draft, check_draft, draft_dir


@pytest.fixture
def target(tmp_path):
    """A three-layer checkpoint in the format the embedded model is written in."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    tensors = {"model.embed_tokens.weight": torch.ones(8, 4), "model.norm.weight": torch.ones(4)}
    for layer in range(3):
        tensors[f"model.layers.{layer}.mlp.down_proj.weight"] = torch.full((4, 4), float(layer))
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 3,
                                                    "tie_word_embeddings": True}))
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_a_draft_keeps_the_first_layers_the_norm_and_the_tokenizer(target):
    folder = build_draft(target, 2)
    tensors = load_file(folder / "model.safetensors")
    assert sorted(k for k in tensors if ".layers." in k) == [
        "model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"]
    assert "model.norm.weight" in tensors and "model.embed_tokens.weight" in tensors
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 2
    assert (folder / "tokenizer.json").exists()
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    assert build_draft(target, 2) == folder           # built once, then reused
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("depth", [0, 3, 30])
def test_a_depth_out_of_range_is_refused(target, depth):
    with pytest.raises(DraftError, match=f"draft depth {depth} out of range"):
        build_draft(target, depth)


def test_a_draft_whose_provenance_does_not_match_its_key_is_refused(target):
    folder = build_draft(target, 1)
    record = json.loads((folder / "specbench-provenance.json").read_text())
    with pytest.raises(DraftError, match="depth is 1, the key says 2"):
        check_draft(folder, 2, record["source_sha256"])
    with pytest.raises(DraftError, match="source_sha256"):
        check_draft(folder, 1, "0" * 64)
    with pytest.raises(DraftError, match="no draft checkpoint here"):
        check_draft(draft_dir(target, 2), 2, record["source_sha256"])


def test_the_command_line_names_a_bad_depth_in_one_line(target, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["draft", "--model", str(target), "--depth", "7"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "draft depth 7 out of range" in err[0]


def test_the_command_line_prints_the_speculative_config(target, capsys):
    assert main(["draft", "--model", str(target), "--depth", "1", "--gamma", "3"]) == 0
    folder, config = capsys.readouterr().out.strip().split("\t")
    assert json.loads(config.split("'")[1]) == {"method": "draft_model", "model": folder,
                                                "num_speculative_tokens": 3}


def test_the_engine_speaks_vllms_draft_model_config_and_records_the_draft(target):
    from specbench.engine.vllm_engine import EngineSettings
    folder = build_draft(target, 2)
    settings = EngineSettings(model=str(target), gamma=3, speculative_method="draft_model",
                              draft_model=str(folder))
    settings.validate()
    assert settings.llm_kwargs()["speculative_config"] == {
        "method": "draft_model", "model": str(folder), "num_speculative_tokens": 3}
    record = settings.manifest_fields()["draft_model"]
    assert record["depth"] == 2 and len(record["weights_sha256"]) == 64
    with pytest.raises(ValueError, match="go together"):
        EngineSettings(model=str(target), speculative_method="draft_model").validate()


def test_a_draft_sweep_is_its_own_kind_and_resumes_with_its_draft(target):
    from specbench.measure.sweep_config import SweepConfig
    cfg = SweepConfig(model=str(target), draft_depth=2, gammas=(0, 2))
    assert cfg.run_kind() == "draft-sweep"
    assert cfg.engine_options()["speculative_method"] == "draft_model"
    # The embedded model carries a provenance record of the same name, without a depth.
    (target / "specbench-provenance.json").write_text(json.dumps({"source_package": "x"}))
    assert SweepConfig(model=str(target)).run_kind() == "sweep"
    assert SweepConfig(model=cfg.resolved_draft(), gammas=(0,)).run_kind() == "draft-sweep"
    manifest = {"grid": {"gammas": [0, 2], "batches": [1], "workloads": ["repeat"],
                         "max_tokens": 8, "warmup": 0, "reps": 1, "draft_depth": 2},
                "dtype": "bfloat16", "load": {"max_load": 2.0}, "model": {"path": str(target)},
                "engine": {"name": "vllm", "settings": {},
                           "speculative_method": "draft_model"}}
    resumed = SweepConfig.from_manifest(manifest)
    assert resumed.draft_depth == 2 and resumed.engine_options() == cfg.engine_options()


@pytest.mark.engine
@pytest.mark.second_lane
def test_vllm_cpu_drafts_with_a_draft_model_in_a_run_of_its_own_kind(tmp_path):
    """The real engine: a two-layer draft of the embedded model proposes through vLLM's
    draft_model method; the run is a 'draft-sweep' recording the draft, the counters count
    drafts on every step, and greedy float32 output equals the target's own."""
    from specbench.measure.sweep import SweepConfig, run_sweep
    cfg = SweepConfig(draft_depth=2, gammas=(0, 2), batches=(1,), workloads=("repeat",),
                      prompts=1, reps=1, warmup=0, max_tokens=12, dtype="float32",
                      root=str(tmp_path))
    run = run_sweep(cfg, progress=False)
    assert run.manifest["kind"] == "draft-sweep" and run.run_id.startswith("draft-sweep-")
    assert run.manifest["engine"]["draft_model"]["depth"] == 2
    spec = run.table("cells.csv").query("gamma == 2").iloc[0]
    assert spec["status"] == "ok" and spec["drafting_share"] == 1.0
    assert bool(spec["outputs_equal"])
