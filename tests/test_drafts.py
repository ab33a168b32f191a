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
