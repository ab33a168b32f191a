"""One module per chapter of the book; each has ``numbers(...) -> Numbers``: the chapter's named
values, data-chosen words and guarded sentences, the run ids they came from, and the tables it
shows. A chapter's first cell is ``glue_all(<chapter>.numbers())``; the footer names the function.
"""
from specbench.report.numbers import Numbers, glue_all

__all__ = ["Numbers", "glue_all"]
