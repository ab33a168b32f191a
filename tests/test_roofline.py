import json

import numpy as np
import pytest

from specbench import roofline as rl


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
