"""The accuracy chapter's host section: counts instead of lists, paired verdicts that say "tie"
unless the interval excludes zero, and the two host sessions of one SKU side by side."""
from __future__ import annotations

import pandas as pd
import pytest
from specbench.report import host_evidence as hosts
from specbench.report.chapters import accuracy


def test_count_across_counts_and_never_names():
    assert accuracy.count_across({"a": True, "b": True}) == "on every SKU"
    assert accuracy.count_across({"a": False, "b": False}) == "on no SKU"
    assert accuracy.count_across({"a": True, "b": False, "c": True}) == "on 2 of 3 SKUs"
    assert accuracy.count_across({"a": True}) == "on the one SKU"
    with pytest.raises(ValueError):
        accuracy.count_across({})


def test_tally_reports_losses_as_prominently_as_wins():
    better, worse, tie = "model better", "ratio better", "tie"
    assert hosts._tally([better, better], "tier") == "the model wins on both tiers"
    assert hosts._tally([worse, worse, worse], "host") == "ratio transfer wins on every host"
    assert hosts._tally([better, tie, worse], "host session") == \
        "the model wins on 1, ties on 1 and loses on 1 of 3 host sessions"
    assert hosts._tally([tie, worse], "tier") == "the model ties on 1 and loses on 1 of 2 tiers"


def test_paired_verdict_is_a_tie_when_the_interval_spans_zero():
    # Equal errors up to noise: no interval excludes zero.
    assert hosts._paired([1.0, -2.0, 3.0, -1.5], [-1.1, 2.0, -2.9, 1.4]) == "tie"
    assert hosts._paired([1.0, 1.1, 0.9, 1.2, 1.0, 0.8], [9.0, 8.5, 9.5, 10.0, 9.1, 8.7]) \
        == "model better"


def _two_sessions():
    rows = []
    for session, run, scale in (("period-x-20261130", "sweep-20261130T000000-aaaaaa", 1.0),
                                ("boot-b", "sweep-20261204T000000-bbbbbb", 2.0)):
        for workload in ("repeat", "edit"):
            for batch in (1, 4):
                base = 30.0 * scale
                for gamma, pot in ((0, base), (2, base / 2)):
                    rows.append({"sku": "cpu-x", "sku_label": "X", "host_session": session,
                                 "run_id": run, "workload": workload, "gamma": gamma,
                                 "batch": batch, "temperature": 0.0, "t_base_ms": base,
                                 "pot_ms": pot})
    return pd.DataFrame(rows)


def test_twin_hosts_pairs_the_two_sessions_of_one_sku():
    pairs = accuracy.twin_hosts(_two_sessions())
    assert len(pairs) == 8
    assert (pairs["host_a"] == "X, from 30 Nov").all()
    assert (pairs["host_b"] == "X, from 4 Dec").all()
    summary = accuracy.twin_summary(pairs)
    row = summary.iloc[0]
    assert row["γ=0 step B/A"] == pytest.approx(2.0)
    assert row["speedup moved %, batch 1"] == pytest.approx(0.0)
    assert len(summary.columns) <= 7


def test_one_session_per_sku_has_no_twin():
    cells = _two_sessions()
    assert accuracy.twin_hosts(cells[cells["host_session"] == "boot-b"]).empty
