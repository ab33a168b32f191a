"""Write every chapter's executed outputs into tests/nbval/<chapter>.ipynb, from a book build.

`make references` renders the book from the committed run store (as `make test` does) and then
runs this: each reference is the build's own execution of the chapter (read from its
jupyter-cache), stripped small and stable — no ids, no execution metadata, no PNG fallbacks,
outputs passed through tests/nbval/sanitize.cfg (a chart is stored as its spec digest, not its
spec) — so one chapter's change rewrites one small file. Each records the CPU that wrote it
(metadata.specbench.written_on): the comparison tolerates that CPU's last-bit rounding
(tests/chapter_outputs.py, REL_TOL), and a reader of a failure sees where the reference came from.
"""
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
# Imported once tests/ is on the path.
from chapter_outputs import REFERENCES, chapters, executed, sanitize_patterns, strip  # noqa: E402
from specbench.engine.hardware import hardware_info  # noqa: E402


def written_on() -> dict:
    """The CPU kind (and numpy) whose arithmetic the references record."""
    import numpy
    info = hardware_info()
    return {**{k: info[k] for k in ("cpu_model", "cpu_family", "cpu_model_number",
                                    "cpu_stepping", "machine")},
            "numpy": numpy.__version__}


def raised(notebook) -> list[str]:
    """One line per cell whose execution raised: a reference must never freeze an error."""
    return [f"cell {number}: {output['ename']}: {output['evalue'].splitlines()[0]}"
            for number, cell in enumerate(notebook.cells)
            for output in cell.get("outputs", []) if output.get("output_type") == "error"]


def main(names: list[str] | None = None) -> int:
    """Every chapter, or only those named (``python scripts/update_references.py planning``).
    A chapter whose build raised in a cell is named and not written; the exit status is 1."""
    REFERENCES.mkdir(parents=True, exist_ok=True)
    patterns = sanitize_patterns()
    origin = written_on()
    failed = 0
    for chapter in chapters():
        if names and chapter.stem not in names:
            continue
        target = REFERENCES / f"{chapter.stem}.ipynb"
        notebook = strip(executed(chapter), patterns)
        if errors := raised(notebook):
            print(f"{chapter.name}: not written, the build raised in "
                  f"{'; '.join(errors)}", file=sys.stderr)
            failed += 1
            continue
        notebook.metadata["specbench"] = {"written_on": origin}
        nbformat.write(notebook, target)
        print("wrote", target.relative_to(ROOT))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
