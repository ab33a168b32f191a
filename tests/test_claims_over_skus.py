"""Claims are judged on every SKU: a store in which one claim turns false on a single SKU (and
stays as it was on the rest) changes the sentence to exactly what that SKU-by-SKU verdict says
(the SKU named among the exceptions, or "on no SKU" when it was the only one; the accuracy
chapter counts instead, "on k of n SKUs", and its tables name them)."""
import json
from pathlib import Path

import pandas as pd
import pytest

from specbench.report import wording
from specbench.report import numbers as base
from specbench.report.chapters import accuracy, regimes, story
from specbench.store.runs import sha256_file

pytestmark = pytest.mark.data


@pytest.fixture
def store(store_to_change):
    return store_to_change


@pytest.fixture
def cells(analysed_store):
    """The committed store's greedy cells (the copy each test perturbs starts as these)."""
    return analysed_store[analysed_store["temperature"] == 0]


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


def _pick(holds: dict[str, bool], value: bool = True) -> str:
    """A SKU where the claim is ``value``; the committed store has one for every claim tested
    here (a store without one leaves the test without its premise: a failure, not a skip)."""
    chosen = [s for s, ok in holds.items() if ok == value]
    assert chosen, f"no SKU where the claim is {value} in the committed store: {holds}"
    return chosen[0]


def test_eq1_fit_at_batch_one_counts_and_tables_the_skus(store, cells):
    """One SKU's fit broken and another's made exact: the count follows both, so neither
    "none of" nor "every one of" can pass for it, and the chapter's table names both."""
    before = base.eq1_fits_batch1(cells)
    fits, misfits = _pick(before, True), _pick(before, False)
    spec_b1 = cells[(cells["batch"] == 1) & (cells["gamma"] > 0)]
    one = spec_b1[spec_b1["sku_label"] == fits].iloc[:1]
    _rewrite(store, one, one["pot_ms"] * 1.6)                    # one cell 60 % slower
    other = spec_b1[spec_b1["sku_label"] == misfits]
    _rewrite(store, other, other["pred_eq1_ms"])                 # every cell as eq. 1 predicts
    after = {**before, fits: False, misfits: True}
    n = regimes.numbers(store)
    assert n["b1_fit_where"] == base.count_of(after)
    table = n.tables["per_sku"].set_index("SKU")
    within = next(c for c in table.columns if c.startswith("within"))
    assert table[within].to_dict() == after


def _batch4_as_eq1_predicts(store, cells, sku):
    mine = cells[(cells["sku_label"] == sku) & (cells["batch"] == 4) & (cells["gamma"] > 0)]
    _rewrite(store, mine, mine["pred_eq1_ms"])   # eq. 1 with the roofline's d: exact


def test_the_batch4_heading_names_the_skus_it_holds_on(store, cells):
    before = base.batch4_against(cells)
    sku = _pick(before)
    _batch4_as_eq1_predicts(store, cells, sku)
    after = {**before, sku: False}
    expected = (f"Against the thesis: batch 4, {wording.across(after)}." if any(after.values())
                else f"For the thesis: batch 4, {wording.across(dict.fromkeys(after, True))}.")
    assert story.numbers(store)["b4_heading"] == expected


def test_worse_than_ignoring_it_is_judged_per_sku(store, cells):
    before = base.roofline_worse_than_zero(cells)
    sku = _pick(before)
    _batch4_as_eq1_predicts(store, cells, sku)
    after = {**before, sku: False}
    numbers = accuracy.numbers(store)
    # The accuracy chapter counts (its table names the SKUs): one SKU more or fewer changes it.
    assert numbers["b4_roofline_worse_where"] == accuracy.count_across(after)
    assert numbers["b4_roofline_worse_count"] == sum(after.values())


def test_both_directions_is_judged_per_sku(store, cells):
    before = base.roofline_both_directions(cells)
    sku = _pick(before)
    rep4 = cells[(cells["sku_label"] == sku) & (cells["batch"] == 4) & (cells["gamma"] > 0)
                 & (cells["workload"] == "repeat")]
    # Twice the roofline's step everywhere: the roofline under-charges at every γ.
    cost = 2 * (1 + rep4["d_roofline"]) * rep4["t_base_ms"] / rep4["emitted_per_step"]
    _rewrite(store, rep4, cost)
    expected = accuracy.count_across({**before, sku: False})
    assert accuracy.numbers(store)["b4_both_directions_where"] == expected
