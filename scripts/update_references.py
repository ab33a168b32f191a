"""Re-execute every executable chapter of the book into tests/nbval/<chapter>.ipynb.

nbval re-runs these notebooks in CI against the committed runs and compares each output with
the stored one, so a changed number in runs/ (or in the analysis) fails CI with a diff. Run
this after changing a chapter or committing a new run: `make references`.

The references are kept small and stable, so one chapter's change rewrites one small file:
no cell ids, no execution timing metadata, no PNG fallbacks (nbval does not compare
images), and every output passed through the same sanitize patterns nbval applies
(tests/nbval/sanitize.cfg) — a chart is stored as its spec digest, not its spec.
"""
import configparser
import re
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "nbval"
SANITIZE = OUT / "sanitize.cfg"
DROPPED_MIME = ("image/png", "image/jpeg")


def chapters() -> list[Path]:
    return sorted(p for p in (ROOT / "book").glob("*.md")
                  if p.read_text().startswith("---\njupytext:"))


def sanitize_patterns(path: Path = SANITIZE) -> list[tuple[re.Pattern, str]]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(path)
    return [(re.compile(config[s]["regex"]), config[s]["replace"]) for s in config.sections()]


def _clean_text(value, patterns):
    text = "".join(value) if isinstance(value, list) else value
    for regex, replace in patterns:
        text = regex.sub(replace, text)
    return text


def strip(notebook, patterns) -> nbformat.NotebookNode:
    """The executed notebook without ids, execution metadata and images; outputs sanitized."""
    notebook.nbformat, notebook.nbformat_minor = 4, 4
    notebook.metadata = {"kernelspec": notebook.metadata.get("kernelspec", {})}
    for cell in notebook.cells:
        cell.pop("id", None)
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
        if cell.cell_type != "code":
            continue
        # Execution counts stay: nbval reads a cell without one as never run, and in a
        # top-to-bottom execution they are 1, 2, 3… — stable. Timings live in the metadata.
        for output in cell.outputs:
            if "metadata" in output:
                output["metadata"] = {}
            if "data" in output:
                output["data"] = {mime: (_clean_text(v, patterns) if isinstance(v, (str, list))
                                         else v)
                                  for mime, v in output["data"].items() if mime not in DROPPED_MIME}
            if "text" in output:
                output["text"] = _clean_text(output["text"], patterns)
    return notebook


def main(names: list[str] | None = None) -> None:
    """Every chapter, or only those named (``python scripts/update_references.py planning``)."""
    OUT.mkdir(parents=True, exist_ok=True)
    patterns = sanitize_patterns()
    for chapter in chapters():
        if names and chapter.stem not in names:
            continue
        notebook = jupytext.read(chapter)
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(OUT)}}).execute()
        target = OUT / f"{chapter.stem}.ipynb"
        nbformat.write(strip(notebook, patterns), target)
        print("wrote", target.relative_to(ROOT))


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
