"""Every chapter's outputs, as the book build executed them, equal its reference.

The build (`make test` renders the committed run store) executes each chapter once; this reads
those executions from the build's cache instead of executing the chapters a second time, and
compares them with tests/nbval/<chapter>.ipynb (`make references` writes both from the same
build). A changed number in the committed runs, or a changed analysis, fails here with the
cell and the two values.
"""
import nbformat
import pytest

from chapter_outputs import REFERENCES, chapters, differences, executed, sanitize_patterns, strip

pytestmark = pytest.mark.book


@pytest.mark.parametrize("chapter", chapters(), ids=lambda p: p.stem)
def test_chapter_outputs_equal_the_reference(chapter):
    reference = REFERENCES / f"{chapter.stem}.ipynb"
    assert reference.exists(), f"{reference} is missing: run `make references`"
    try:
        built = executed(chapter)
    except LookupError as exc:
        pytest.fail(str(exc))
    problems = differences(strip(built, sanitize_patterns()), nbformat.read(reference, 4))
    assert not problems, f"{chapter.name} differs from {reference.name}:\n" + "\n".join(problems)
