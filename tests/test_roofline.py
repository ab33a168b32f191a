import json

import numpy as np
import pytest

from specbench.theory import roofline as rl


def test_llama8b_h100_verify_overhead_is_small_and_grows_with_gamma():
    d = rl.verify_overhead(rl.MODELS["llama-3.1-8b"], rl.SKUS["h100-sxm"], [1, 2, 4, 6])
    assert np.all(np.diff(d) > 0)
    assert 0 < d[-1] < 0.03   # the paper reports <= 2.3 % from its own predictor


def test_memory_bound_regime_until_many_rows():
    model, sku = rl.MODELS["llama-3.1-8b"], rl.SKUS["h100-sxm"]
    # Hundreds of rows cross the ridge point: then verifying them is no longer free.
    assert rl.verify_overhead(model, sku, 511) > 0.5
    assert isinstance(rl.verify_overhead(model, sku, 6), float)


def test_more_bandwidth_same_compute_shifts_nothing_in_memory_bound_decode():
    model = rl.MODELS["llama-3.1-8b"]
    t100 = rl.step_time(model, rl.SKUS["h100-sxm"], 1)
    t200 = rl.step_time(model, rl.SKUS["h200"], 1)
    assert t100 / t200 == pytest.approx(4.8 / 3.35, rel=0.01)


def test_from_hf_config(tmp_path):
    cfg = {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536,
           "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = rl.ModelShape.from_hf_config(tmp_path, name="x")
    assert shape == rl.ModelShape("x", 30, 576, 1536, 9, 3, 49152)
    del cfg["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="hidden_size"):
        rl.ModelShape.from_hf_config(tmp_path)


def test_bad_gamma():
    with pytest.raises(ValueError, match="gamma"):
        rl.verify_overhead(rl.MODELS["smollm2-135m"], rl.SKUS["h200"], -1)


def test_cpu_microbenchmark_returns_positive_ceilings():
    sku = rl.measure_cpu_sku("cpu-test", gemm_n=256, copy_mib=16, repeats=2)
    assert sku.peak_flops > 1e8 and sku.bandwidth > 1e8
    assert "float32 numpy" in sku.source
    bf16 = rl.measure_cpu_sku(gemm_n=256, copy_mib=16, repeats=2, dtype="bfloat16")
    assert bf16.peak_flops > 1e8 and "bfloat16 torch" in bf16.source


# Real `nvidia-smi --query-gpu=name` strings -> (bandwidth TB/s, dense bf16 TFLOP/s).
NVIDIA_SMI_NAMES = {
    "NVIDIA H100 80GB HBM3": (3.35, 989),        # H100 SXM5
    "NVIDIA H100 PCIe": (2.0, 756),
    "NVIDIA H100 NVL": (3.9, 835),
    "NVIDIA H200": (4.8, 989),
    "NVIDIA H200 NVL": (4.8, 835),
    "NVIDIA GH200 480GB": (4.0, 989),
    "NVIDIA A100-SXM4-40GB": (1.555, 312),
    "NVIDIA A100-SXM4-80GB": (2.039, 312),
    "NVIDIA A100-PCIE-40GB": (1.555, 312),
    "NVIDIA A100 80GB PCIe": (1.935, 312),
    "NVIDIA L40S": (0.864, 362.05),
}


@pytest.mark.parametrize("name, expected", NVIDIA_SMI_NAMES.items())
def test_gpu_names_match_exactly_to_their_own_datasheet(name, expected):
    entry = rl.gpu_ceilings(name, "bfloat16")
    assert entry["status"] == "datasheet" and entry["gpu_name"] == name
    assert entry["bandwidth"] == pytest.approx(expected[0] * 1e12)
    assert entry["peak_flops"] == pytest.approx(expected[1] * 1e12)
    assert "datasheet" in entry["source"]
    assert rl.sku_from_manifest(entry) == rl.Sku(entry["name"], entry["peak_flops"],
                                                 entry["bandwidth"], entry["source"])


def test_gh200_is_not_an_h200_and_variants_differ():
    gh200, h200 = rl.gpu_ceilings("NVIDIA GH200 480GB"), rl.gpu_ceilings("NVIDIA H200")
    assert gh200["name"] != h200["name"] and gh200["bandwidth"] != h200["bandwidth"]
    sxm, pcie = rl.gpu_ceilings("NVIDIA H100 80GB HBM3"), rl.gpu_ceilings("NVIDIA H100 PCIe")
    assert pcie["bandwidth"] < sxm["bandwidth"] and pcie["peak_flops"] < sxm["peak_flops"]


def test_dtype_picks_the_datasheet_peak():
    bf16 = rl.gpu_ceilings("NVIDIA A100-SXM4-80GB", "bfloat16")
    fp32 = rl.gpu_ceilings("NVIDIA A100-SXM4-80GB", "float32")
    assert fp32["peak_flops"] == pytest.approx(19.5e12) and bf16["peak_flops"] == 312e12
    assert rl.gpu_ceilings("NVIDIA H100 80GB HBM3", "float8")["status"] == "unknown"


@pytest.mark.parametrize("name, reason", [
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "MIG slice 1g.10gb of NVIDIA H100 80GB HBM3"),
    ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "MIG slice 3g.20gb"),
    ("NVIDIA H100", "no datasheet entry"),          # substring of real names: not a match
    ("NVIDIA GeForce RTX 4090", "no datasheet entry"),
    ("h200", "no datasheet entry"),
])
def test_unknown_gpus_are_explicit_not_zero(name, reason):
    entry = rl.gpu_ceilings(name)
    assert entry["status"] == "unknown" and reason in entry["reason"]
    assert rl.sku_from_manifest(entry) is None
    shape = {"name": "x", "layers": 2, "hidden": 64, "intermediate": 128, "heads": 4,
             "kv_heads": 2, "vocab": 100}
    assert rl.roofline_status(shape, entry).startswith("no roofline: ")


def test_unknown_model_shape_is_explicit():
    sku = dataclasses_asdict(rl.SKUS["h200"])
    assert rl.roofline_status(None, sku).startswith("no roofline: model shape unknown")
    bad = {"status": "unknown", "reason": "config.json: missing field 'hidden_size'"}
    assert "hidden_size" in rl.roofline_status(bad, sku)
    ok = {"name": "x", "layers": 2, "hidden": 64, "intermediate": 128, "heads": 4,
          "kv_heads": 2, "vocab": 100}
    assert rl.roofline_status(ok, sku).startswith("roofline:")


def test_analysis_leaves_d_missing_without_a_roofline():
    import pandas as pd

    from specbench.derive import analysis

    class FakeRun:
        manifest = {"model_shape": None, "grid": {"max_tokens": 8},
                    "roofline_sku": rl.gpu_ceilings("NVIDIA GeForce RTX 4090")}

    from specbench.theory.predict import add_predictions
    cells = pd.DataFrame({"sku": ["x"] * 2, "workload": ["repeat"] * 2, "batch": [1, 1],
                          "gamma": [0, 2], "temperature": [0.0, 0.0], "pot_ms": [10.0, 5.0],
                          "t_base_ms": [10.0, 10.0], "alpha": [0.0, 0.9],
                          "divisor_counters": [1.0, 2.8], "drafting_share": [0.0, 1.0],
                          "prompt_tokens": [100, 100], "d_micro": [float("nan")] * 2})
    run = FakeRun()
    cells["d_roofline"] = analysis._verify_overheads(cells, run)
    out = add_predictions(cells)
    assert out["d"].isna().all() and out["pred_eq1_ms"].isna().all()
    assert out["model_pot_ms"].isna().all()             # never a silent d = 0
    assert out["pred_blind_ms"].notna().all()          # the rival needs no roofline
    assert analysis.roofline_of(run).startswith("no roofline: no datasheet entry")
    run.manifest["hardware"] = {"gpus": [{"name": "NVIDIA GeForce RTX 4090"}]}
    assert analysis.sku_label(run) == "GeForce RTX 4090 (no roofline)"


def dataclasses_asdict(x):
    import dataclasses
    return dataclasses.asdict(x)


def test_from_hf_config_head_dim_text_config_and_moe(tmp_path):
    # Gemma-style explicit head_dim (not hidden / heads), nested in a multimodal config.
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {
        "num_hidden_layers": 34, "hidden_size": 2560, "intermediate_size": 10240,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "vocab_size": 262208}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = rl.ModelShape.from_hf_config(tmp_path, name="g")
    assert shape.head_dim == 256 and shape.layers == 34 and shape.experts == 1
    # Mixtral: 8 local experts, 2 per token.
    mixtral = {"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
               "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
               "num_local_experts": 8, "num_experts_per_tok": 2}
    (tmp_path / "config.json").write_text(json.dumps(mixtral))
    moe = rl.ModelShape.from_hf_config(tmp_path)
    assert (moe.experts, moe.experts_per_token, moe.intermediate) == (8, 2, 14336)
    # Qwen-MoE: num_experts and a narrower moe_intermediate_size per expert.
    qwen = {**mixtral, "num_experts": 60, "moe_intermediate_size": 1408,
            "num_experts_per_tok": 4}
    del qwen["num_local_experts"]
    (tmp_path / "config.json").write_text(json.dumps(qwen))
    q = rl.ModelShape.from_hf_config(tmp_path)
    assert (q.experts, q.experts_per_token, q.intermediate) == (60, 4, 1408)
    # Verifying more rows routes to more experts: d(γ) is far from free for an MoE,
    # unlike the dense model of the same attention shape.
    dense = rl.ModelShape("dense", 32, 4096, 14336, 32, 8, 32000)
    sku = rl.SKUS["h100-sxm"]
    assert rl.verify_overhead(moe, sku, 6) > 5 * rl.verify_overhead(dense, sku, 6)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json: not a readable JSON"):
        rl.ModelShape.from_hf_config(tmp_path)


def test_old_manifest_shapes_still_load():
    # Manifests written before head_size/experts existed have only the first nine fields.
    old = {"name": "SmolLM2-135M", "layers": 30, "hidden": 576, "intermediate": 1536,
           "heads": 9, "kv_heads": 3, "vocab": 49152, "weight_bytes": 2, "act_bytes": 2}
    shape = rl.shape_from_manifest(old)
    assert shape.head_dim == 64 and shape.experts == 1
