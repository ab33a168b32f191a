"""Write every chapter's executed outputs into tests/nbval/<chapter>.ipynb, from a book build.

`make references` renders the book from the committed run store (as `make test` does) and then
runs this: each reference is the build's own execution of the chapter (read from its
jupyter-cache), stripped small and stable — no ids, no execution metadata, no PNG fallbacks,
outputs passed through tests/nbval/sanitize.cfg (a chart is stored as its spec digest, not its
spec) — so one chapter's change rewrites one small file.
"""
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
# Imported once tests/ is on the path.
from chapter_outputs import REFERENCES, chapters, executed, sanitize_patterns, strip  # noqa: E402


def main(names: list[str] | None = None) -> None:
    """Every chapter, or only those named (``python scripts/update_references.py planning``)."""
    REFERENCES.mkdir(parents=True, exist_ok=True)
    patterns = sanitize_patterns()
    for chapter in chapters():
        if names and chapter.stem not in names:
            continue
        target = REFERENCES / f"{chapter.stem}.ipynb"
        nbformat.write(strip(executed(chapter), patterns), target)
        print("wrote", target.relative_to(ROOT))


if __name__ == "__main__":
    main(sys.argv[1:])
