"""The microbenchmarked verify cost: step assembly against a hand-computed case."""
import pandas as pd
import pytest

from specbench.measure.microbench import layer_shapes, step_kernel_ms, verify_delta_ms
from specbench.theory.roofline import MODELS


def _kernels():
    rows = []
    for r, ms in ((1, 1.0), (3, 1.5), (4, 2.0), (12, 4.0)):
        for op in ("qkv", "o", "gate_up", "down"):
            rows.append({"op": op, "rows": r, "ms": ms / 4})   # the four sum to `ms`
        rows.append({"op": "lm_head", "rows": r, "ms": 10 * ms})
    rows += [{"op": "attention", "rows": 1, "ms": 0.1}, {"op": "attention", "rows": 3, "ms": 0.2}]
    return pd.DataFrame(rows)


def test_step_time_by_hand():
    k = _kernels()
    # 2 layers, batch 1, 1 row: 2·(1.0 + 1·0.1) + 10 = 12.2
    assert step_kernel_ms(k, 2, 1, 1) == pytest.approx(12.2)
    # batch 4, 3 rows each (12 rows): 2·(4.0 + 4·0.2) + 40 = 49.6
    assert step_kernel_ms(k, 2, 4, 3) == pytest.approx(49.6)


def test_verify_delta_by_hand():
    d = verify_delta_ms(_kernels(), 2, [1, 4], [0, 2]).set_index(["batch", "gamma"])
    assert d.loc[(1, 0), "delta_ms"] == 0
    # batch 1, γ=2: 2·(1.5 + 0.2) + 15 − 12.2 = 6.2
    assert d.loc[(1, 2), "delta_ms"] == pytest.approx(6.2)
    # batch 4, γ=2: 49.6 − (2·(2.0 + 4·0.1) + 20) = 49.6 − 24.8 = 24.8
    assert d.loc[(4, 2), "delta_ms"] == pytest.approx(24.8)


def test_layer_shapes_of_the_embedded_model():
    shapes = layer_shapes(MODELS["smollm2-135m"])
    assert shapes["qkv"] == (576, (9 + 2 * 3) * 64)
    assert shapes["gate_up"] == (576, 2 * 1536) and shapes["lm_head"] == (576, 49152)
