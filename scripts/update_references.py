"""Re-execute every executable chapter of the book into tests/nbval/<chapter>.ipynb.

nbval re-runs these notebooks in CI against the committed runs and compares each output with
the stored one, so a changed number in runs/ (or in the analysis) fails CI with a diff. Run
this after changing a chapter or committing a new run: `make references`.
"""
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "nbval"


def chapters() -> list[Path]:
    return sorted(p for p in (ROOT / "book").glob("*.md")
                  if p.read_text().startswith("---\njupytext:"))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for chapter in chapters():
        notebook = jupytext.read(chapter)
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(OUT)}}).execute()
        target = OUT / f"{chapter.stem}.ipynb"
        nbformat.write(notebook, target)
        print("wrote", target.relative_to(ROOT))


if __name__ == "__main__":
    main()
