import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def engine_dtype() -> str:
    """The dtype engine tests run in where the dtype is not what they test: this machine's
    fast one (bfloat16 with native bf16, float32 on a CPU without, such as an AVX2-only Zen 3,
    where bfloat16 prefill runs through a fallback several times slower)."""
    from specbench.engine.hardware import default_dtype
    return default_dtype()


def pytest_collection_modifyitems(config, items):
    # Engine tests run by default (CI runs them); SPECBENCH_SKIP_ENGINE=1 skips them locally.
    if os.environ.get("SPECBENCH_SKIP_ENGINE") == "1":
        skip = pytest.mark.skip(reason="SPECBENCH_SKIP_ENGINE=1")
        for item in items:
            if "engine" in item.keywords:
                item.add_marker(skip)
