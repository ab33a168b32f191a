import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def pytest_collection_modifyitems(config, items):
    # Engine tests run by default (CI runs them); SPECBENCH_SKIP_ENGINE=1 skips them locally.
    if os.environ.get("SPECBENCH_SKIP_ENGINE") == "1":
        skip = pytest.mark.skip(reason="SPECBENCH_SKIP_ENGINE=1")
        for item in items:
            if "engine" in item.keywords:
                item.add_marker(skip)
