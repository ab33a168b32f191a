"""Tables a reader can read: no index column, units in the headers, rounding per column,
and a frame that scrolls sideways — with a visible hint — when the table is wider than the page.

``show(frame, digits={"pot (ms)": 1})`` returns an object the notebook displays as HTML (and as
plain text for nbval). The HTML carries no random ids, so executed outputs are reproducible.
"""
from __future__ import annotations

import hashlib

import pandas as pd

__all__ = ["show", "Table", "SCROLL_HINT"]

SCROLL_HINT = "wider than the page: scroll sideways →"


class Table:
    def __init__(self, frame: pd.DataFrame, digits: dict, default_digits: int):
        self.frame = frame.reset_index(drop=True)
        self.frame.columns = [str(c) for c in self.frame.columns]   # no named column index
        self.digits = digits
        self.default_digits = default_digits

    def _formatted(self) -> pd.DataFrame:
        out = self.frame.copy()
        for col in out.columns:
            if pd.api.types.is_bool_dtype(out[col]):
                out[col] = out[col].map({True: "yes", False: "no"})
            elif pd.api.types.is_float_dtype(out[col]):
                n = self.digits.get(col, self.default_digits)
                out[col] = out[col].map(lambda v, n=n: "—" if pd.isna(v) else f"{v:,.{n}f}")
            else:
                out[col] = out[col].map(lambda v: "—" if v is None or (
                    not isinstance(v, str) and pd.isna(v)) else str(v))
        return out

    def _repr_html_(self) -> str:
        text = self._formatted()
        uid = hashlib.sha256(text.to_json().encode()).hexdigest()[:10]
        body = text.to_html(index=False, escape=True, border=0,
                            classes=["sb-table", "table"], table_id=f"sb-{uid}")
        return (f'<div class="sb-scroll"><p class="sb-scroll-hint">{SCROLL_HINT}</p>'
                f"{body}</div>")

    def __repr__(self) -> str:
        return self._formatted().to_string(index=False)


def show(frame: pd.DataFrame, digits: dict | None = None, default_digits: int = 2) -> Table:
    """Display ``frame`` without its index, floats rounded (``digits`` per column name)."""
    return Table(frame, digits or {}, default_digits)
