"""Execute a measurement notebook with papermill and store the executed copy in its run.

    python -m specbench.cli.notebooks sweep -p reps 5 -p gammas "[0, 2]"
    python -m specbench.cli.notebooks host_floor

papermill cannot read MyST markdown, so the notebook is read with jupytext and handed over as
a notebook object. The notebook measures into a run it leaves open; this runner copies the
executed notebook into that run and only then marks the run complete.
"""
from __future__ import annotations

import argparse
import ast
import sys
import tempfile
from pathlib import Path

from specbench.store.runs import REPO_ROOT, open_run

NOTEBOOKS = REPO_ROOT / "notebooks"


def execute(name: str, parameters: dict | None = None, kernel: str = "python3") -> Path:
    """Run ``notebooks/<name>.md``; return the folder of the run it wrote."""
    import jupytext
    import papermill

    source = NOTEBOOKS / f"{name}.md"
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such notebook (choose from "
                                f"{sorted(p.stem for p in NOTEBOOKS.glob('*.md'))})")
    notebook = jupytext.read(source)
    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "run_path"
        executed = Path(tmp) / f"{name}.ipynb"
        papermill.execute_notebook(notebook, str(executed), kernel_name=kernel,
                                   parameters={**(parameters or {}),
                                               "run_path_file": str(marker)},
                                   cwd=str(NOTEBOOKS), progress_bar=True)
        run = open_run(Path(marker.read_text()))
        run.write_text(f"{name}.ipynb", executed.read_text())
    run.finish()
    return run.path


def _parameter(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbench.cli.notebooks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", help="sweep, host_floor or serving")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                        metavar=("NAME", "VALUE"), help="notebook parameter (Python literal)")
    args = parser.parse_args(argv)
    print(execute(args.notebook, {k: _parameter(v) for k, v in args.parameter}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
