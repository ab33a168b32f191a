"""Readable tables (specbench.report.tables): no index column, rounding, a scroll box with a
hint."""
import numpy as np
import pandas as pd

from specbench.report import tables


def test_table_html_has_no_index_rounds_and_scrolls():
    frame = pd.DataFrame({"latency (ms)": [35.8611, np.nan], "equal": [True, False],
                          "SKU": ["a", "b"]}, index=[7, 9])
    table = tables.show(frame, digits={"latency (ms)": 1})
    html = table._repr_html_()
    assert "35.9" in html and "35.86" not in html and "—" in html and ">yes<" in html
    assert ">7<" not in html and ">9<" not in html            # the pandas index is not shown
    assert html.startswith('<div class="sb-scroll">') and tables.SCROLL_HINT in html
    assert html == tables.show(frame, digits={"latency (ms)": 1})._repr_html_()  # stable ids
    assert repr(table).splitlines()[0].split() == ["latency", "(ms)", "equal", "SKU"]
