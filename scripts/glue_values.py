"""Execute every chapter of the book and collect its glued values: {chapter: {name: text}}.

Usage: python scripts/glue_values.py OUT.json — or import :func:`glue_values` (tests/test_layout.py
compares them with the values saved before the package was restructured).
"""
import json
import sys
from pathlib import Path

import jupytext
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def chapters() -> list[Path]:
    return sorted(p for p in (ROOT / "book").glob("*.md")
                  if p.read_text().startswith("---\njupytext:"))


def glue_values(chapter: Path) -> dict[str, str]:
    """Execute one chapter; every ``glue`` output's name and plain-text value."""
    notebook = jupytext.read(chapter)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "book")}}).execute()
    values = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                values[name] = next((v for k, v in output.get("data", {}).items()
                                     if k.endswith("text/plain")), None)
    return values


if __name__ == "__main__":
    result = {c.stem: glue_values(c) for c in chapters()}
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True, ensure_ascii=False))
