"""The whole-store cache (specbench.store.cache): one computation per store content and code,
recomputed when a byte of the store changes, never an error from a bad cache file, and results
equal to the uncached function's, which no caller can change."""
from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pandas as pd
import pytest

from specbench.derive import analysis, transfer
from specbench.store import cache

STORE = Path(__file__).parent / "fixtures" / "store_make_book_zen4"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch) -> Path:
    """Each test starts with an empty cache of its own, in memory and on disk."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(cache.CACHE_ENV, str(folder))
    cache.clear_memory()
    yield folder
    cache.clear_memory()


@pytest.fixture
def store(tmp_path) -> Path:
    copy = tmp_path / "runs"
    shutil.copytree(STORE, copy)
    for path in copy.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    return copy


def _computed(name: str) -> int:
    return cache.computations[name]


def _manifest(store: Path) -> Path:
    return next(store.glob("*/sweep-*/manifest.json"))


def test_the_same_store_is_computed_once(store):
    before = _computed("sweep_cells")
    first = analysis.sweep_cells(store)
    again = analysis.sweep_cells(store)
    assert _computed("sweep_cells") == before + 1
    pd.testing.assert_frame_equal(first, again)


def test_the_disk_level_serves_a_new_process(store, own_cache):
    analysis.sweep_cells(store)
    assert list(own_cache.glob("sweep_cells-*.pkl"))
    cache.clear_memory()   # what a chapter's fresh kernel starts with
    before = _computed("sweep_cells")
    analysis.sweep_cells(store)
    assert _computed("sweep_cells") == before


def test_a_copy_of_the_store_elsewhere_is_the_same_store(store, tmp_path):
    other = tmp_path / "elsewhere"
    shutil.copytree(store, other)
    assert cache.store_fingerprint(other) == cache.store_fingerprint(store)
    analysis.sweep_cells(store)
    before = _computed("sweep_cells")
    analysis.sweep_cells(other)
    assert _computed("sweep_cells") == before


def test_a_changed_file_is_recomputed(store):
    first = analysis.sweep_cells(store)
    manifest = json.loads(_manifest(store).read_text())
    manifest["model"]["name"] = "another-model"
    _manifest(store).write_text(json.dumps(manifest))
    before = _computed("sweep_cells")
    changed = analysis.sweep_cells(store)
    assert _computed("sweep_cells") == before + 1
    assert set(first["model"]) != {"another-model"} and set(changed["model"]) == {"another-model"}


def test_a_change_that_keeps_size_and_modification_time_is_recomputed(store, monkeypatch):
    """The stat shortcut of the fingerprint trusts no file's times alone: the change time,
    which no writer can set back, differs. (Every file is taken as old enough to trust its
    times, or the just-made copy would never use the shortcut.)"""
    monkeypatch.setattr(cache, "RACY_NS", -10**12)
    path = _manifest(store)
    old = path.stat()
    os.utime(path, ns=(old.st_atime_ns - 10**10, old.st_mtime_ns - 10**10))   # not racy
    analysis.sweep_cells(store)
    text = path.read_text()
    name = json.loads(text)["model"]["name"]
    swapped = name[:-1] + ("X" if name[-1] != "X" else "Y")
    path.write_text(text.replace(f'"{name}"', f'"{swapped}"'))
    os.utime(path, ns=(old.st_atime_ns - 10**10, old.st_mtime_ns - 10**10))
    assert path.stat().st_size == old.st_size
    assert set(analysis.sweep_cells(store)["model"]) == {swapped}


@pytest.mark.parametrize("damage", [b"", b"not a pickle", b"\x80\x05truncated"])
def test_a_corrupt_cache_file_is_recomputed(store, own_cache, damage):
    first = analysis.sweep_cells(store)
    for path in own_cache.glob("*.pkl"):
        path.write_bytes(damage)
    cache.clear_memory()
    before = _computed("sweep_cells")
    again = analysis.sweep_cells(store)
    assert _computed("sweep_cells") == before + 1
    pd.testing.assert_frame_equal(first, again)


def test_an_unwritable_cache_folder_only_costs_the_speed(store, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocker / "cache"))
    pd.testing.assert_frame_equal(analysis.sweep_cells(store),
                                  analysis.sweep_cells.__wrapped__(store))


def test_cached_results_equal_uncached_ones(store):
    cells = analysis.sweep_cells(store)
    cache.clear_memory()
    pd.testing.assert_frame_equal(analysis.sweep_cells(store),   # from disk
                                  analysis.sweep_cells.__wrapped__(store))
    requests = analysis.request_predictors(store, cells)
    pd.testing.assert_frame_equal(requests, analysis.request_predictors.__wrapped__(store, cells))
    pd.testing.assert_frame_equal(transfer.leave_one_sku_out(cells, requests),
                                  transfer.leave_one_sku_out.__wrapped__(cells, requests))


def test_a_caller_changing_its_result_does_not_change_the_cache(store):
    cells = analysis.sweep_cells(store)
    cells["pot_ms"] = 0.0
    cells.drop(index=cells.index[:3], inplace=True)
    pd.testing.assert_frame_equal(analysis.sweep_cells(store),
                                  analysis.sweep_cells.__wrapped__(store))


def test_frames_are_keyed_by_content():
    cells = pd.DataFrame({"sku": ["a", "b"], "gamma": [0, 2]})
    assert cache._frame_digest(cells) == cache._frame_digest(cells.copy())
    assert cache._frame_digest(cells) != cache._frame_digest(cells.assign(gamma=[0, 3]))
    # The string '1' and the integer 1 print alike; as keys they differ.
    assert (cache._frame_digest(pd.DataFrame({"x": ["1"]}, dtype=object))
            != cache._frame_digest(pd.DataFrame({"x": [1]}, dtype=object)))


def test_warnings_are_raised_on_every_call(store):
    calls = []

    @cache.memoised
    def noisy(root):
        calls.append(root)
        warnings.warn("something about the store", UserWarning, stacklevel=1)
        return len(calls)

    for _ in range(2):
        with pytest.warns(UserWarning, match="something about the store") as raised:
            assert noisy(store) == 1
        # From where the function raised it, so filters by module and place still apply.
        assert raised[0].filename == __file__
    assert len(calls) == 1


def test_a_failure_is_not_cached_and_keeps_its_warnings(store):
    calls = []

    @cache.memoised
    def failing(root):
        calls.append(root)
        warnings.warn("said before failing", UserWarning, stacklevel=1)
        raise FileNotFoundError("nothing to compute")

    for _ in range(2):
        with pytest.warns(UserWarning, match="said before failing"):
            with pytest.raises(FileNotFoundError):
                failing(store)
    assert len(calls) == 2


def test_a_missing_store_is_not_cached(tmp_path):
    with pytest.raises(FileNotFoundError):
        analysis.sweep_cells(tmp_path / "nowhere")


@pytest.mark.data
def test_the_session_cells_are_the_committed_stores(analysed_store, committed_store):
    pd.testing.assert_frame_equal(analysed_store,
                                  analysis.sweep_cells.__wrapped__(committed_store))
