"""Every chapter's outputs, as the book build executed them, equal its reference.

The build (`make test` renders the committed run store) executes each chapter once; this reads
those executions from the build's cache instead of executing the chapters a second time, and
compares them with tests/nbval/<chapter>.ipynb (`make references` writes both from the same
build). A changed number in the committed runs, or a changed analysis, fails here with the
cell and the two values.
"""
import nbformat
import pytest

from chapter_outputs import (
    REFERENCES,
    book_build,
    chapters,
    differences,
    executed,
    sanitize_patterns,
    strip,
)

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


def test_the_build_used_the_chapters_executed_before_it():
    """scripts/execute_chapters.py executes the chapters into the cache before Jupyter Book
    reads them, and marks its records. Had the build not matched one (another reader, another
    hash), myst-nb would have executed it again, under a record of its own without the mark."""
    import jupytext
    from jupyter_cache import get_cache
    cache_dir = book_build() / ".jupyter_cache"
    if not cache_dir.is_dir():
        pytest.fail(f"{cache_dir}: no execution cache — build the book first")
    cache = get_cache(cache_dir)
    by_build = []
    for chapter in chapters():
        try:
            record = cache.match_cache_notebook(jupytext.read(chapter))
        except KeyError:
            pytest.fail(f"{chapter.name}: the build in {cache_dir.parent} did not execute it")
        if (record.data or {}).get("executed_by") != "scripts/execute_chapters.py":
            by_build.append(chapter.name)
    assert not by_build, f"executed by the build, not before it: {by_build}"
