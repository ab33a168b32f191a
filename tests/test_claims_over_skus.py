"""Claims are judged on every SKU: a store in which one claim turns false on a single SKU (and
stays as it was on the rest) changes the sentence to name that SKU."""
import json
import shutil
import stat
from pathlib import Path

import pandas as pd
import pytest

from specbench.report.analysis import sweep_cells
from specbench.report.chapters import accuracy, base, regimes, story
from specbench.store.runs import sha256_file

pytestmark = pytest.mark.data
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path):
    copy = tmp_path / "runs"
    shutil.copytree(ROOT / "runs", copy)
    for path in copy.rglob("*"):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return copy


def _greedy():
    cells = sweep_cells(ROOT / "runs")
    return cells[cells["temperature"] == 0]


def _rewrite(store: Path, cells: pd.DataFrame, new_pot: pd.Series) -> None:
    """Write ``new_pot`` (indexed like ``cells``) into the stored cells.csv of each cell's run."""
    for run_id, group in cells.groupby("run_id"):
        path = next(store.glob(f"*/{run_id}/cells.csv"))
        table = pd.read_csv(path)
        for _, cell in group.iterrows():
            hit = ((table["workload"] == cell["workload"]) & (table["gamma"] == cell["gamma"])
                   & (table["batch"] == cell["batch"])
                   & (table.get("temperature", 0.0) == cell["temperature"]))
            table.loc[hit, "pot_ms"] = new_pot[cell.name]
        table.to_csv(path, index=False)
        _rerecord_checksum(path)


def _rerecord_checksum(table: Path) -> None:
    """The copy's manifest records the edited table's checksum: the edit is the test's
    premise, not the corruption the store's integrity check exists to catch."""
    manifest_path = table.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if table.name in manifest.get("files", {}):
        manifest["files"][table.name] = {"sha256": sha256_file(table),
                                         "bytes": table.stat().st_size}
        manifest_path.write_text(json.dumps(manifest, indent=2))


def _named_as_exception(sentence: str, sku: str) -> bool:
    """The sentence names ``sku`` among the SKUs the claim does not hold on."""
    import re
    match = re.search(r"not on ([^)]*)", sentence)
    return bool(match) and sku in match.group(1)


def _pick(holds: dict[str, bool], value: bool) -> str:
    chosen = [s for s, ok in holds.items() if ok == value]
    if not chosen:
        pytest.skip(f"no SKU where the claim is {value} in the committed store")
    return chosen[0]


def test_eq1_fit_at_batch_one_names_the_sku_it_fails_on(store):
    cells = _greedy()
    sku = _pick(base.eq1_fits_batch1(cells), True)
    mine = cells[(cells["sku_label"] == sku) & (cells["batch"] == 1) & (cells["gamma"] > 0)]
    _rewrite(store, mine.iloc[:1], mine["pot_ms"].iloc[:1] * 1.6)   # one cell 60 % slower
    where = regimes.numbers(store)["b1_fit_where"]
    assert _named_as_exception(where, sku) or where == "on no SKU"


def _batch4_as_eq1_predicts(store, cells, sku):
    mine = cells[(cells["sku_label"] == sku) & (cells["batch"] == 4) & (cells["gamma"] > 0)]
    _rewrite(store, mine, mine["pred_eq1_ms"])   # eq. 1 with the roofline's d: exact


def test_the_batch4_heading_names_the_skus_it_holds_on(store):
    cells = _greedy()
    before = base.batch4_against(cells)
    sku = _pick(before, True)
    _batch4_as_eq1_predicts(store, cells, sku)
    heading = story.numbers(store)["b4_heading"]
    if sum(before.values()) == 1:
        assert heading.startswith("For the thesis")
    else:
        assert _named_as_exception(heading, sku)


def test_worse_than_ignoring_it_is_judged_per_sku(store):
    cells = _greedy()
    before = base.roofline_worse_than_zero(cells)
    sku = _pick(before, True)
    _batch4_as_eq1_predicts(store, cells, sku)
    sentence = accuracy.numbers(store)["b4_roofline_worse_sentence"]
    assert _named_as_exception(sentence, sku) or \
        sentence.startswith("On every SKU the frozen roofline predicts")


def test_both_directions_is_judged_per_sku(store):
    cells = _greedy()
    before = base.roofline_both_directions(cells)
    sku = _pick(before, True)
    rep4 = cells[(cells["sku_label"] == sku) & (cells["batch"] == 4) & (cells["gamma"] > 0)
                 & (cells["workload"] == "repeat")]
    # Twice the roofline's step everywhere: the roofline under-charges at every γ.
    cost = 2 * (1 + rep4["d_roofline"]) * rep4["t_base_ms"] / rep4["emitted_per_step"]
    _rewrite(store, rep4, cost)
    where = accuracy.numbers(store)["b4_both_directions_where"]
    assert _named_as_exception(where, sku) or where == "on no SKU"
