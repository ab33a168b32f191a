import shutil
import stat
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
# A test that reads runs/ or _build/ without its marker fails (tests/marker_guard.py).
pytest_plugins = ["marker_guard"]


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def committed_store() -> Path:
    """The committed run store the data tests judge (``$SPECBENCH_RUNS``, else runs/)."""
    from specbench.store.runs import DEFAULT_ROOT
    return DEFAULT_ROOT


@pytest.fixture(scope="session")
def analysed_store(committed_store):
    """The committed store's cells with their predictions (``analysis.sweep_cells``), computed
    once per session. Shared by every test that asks: read it, never change it in place
    (``.copy()`` first, or call ``sweep_cells`` for a frame of your own)."""
    from specbench.derive.analysis import sweep_cells
    return sweep_cells(committed_store)


@pytest.fixture(scope="session")
def store_copy(committed_store, tmp_path_factory) -> Path:
    """A copy of the committed store, made once per session, for tests that need the store
    somewhere else than where it is (its own folder, its own path). Read only: a test that
    changes a store takes ``store_to_change``."""
    copy = tmp_path_factory.mktemp("committed") / "runs"
    shutil.copytree(committed_store, copy)
    return copy


@pytest.fixture
def store_to_change(store_copy, tmp_path) -> Path:
    """A writable copy of the committed store of this test's own (stored runs are read-only)."""
    copy = tmp_path / "runs"
    shutil.copytree(store_copy, copy)
    for path in copy.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return copy


@pytest.fixture(scope="session")
def engine_dtype() -> str:
    """The dtype engine tests run in where the dtype is not what they test: this machine's
    fast one (bfloat16 with native bf16, float32 on a CPU without, such as an AVX2-only Zen 3,
    where bfloat16 prefill runs through a fallback several times slower)."""
    from specbench.engine.hardware import default_dtype
    return default_dtype()

