"""The chapter references judge results, not CPUs.

A reference written on one CPU must hold on another whose numpy rounds a sum differently in the
last bit (a Zen 3 printed 9.341246887026797 where the Zen 4 reference says
9.341246887026799), and must still fail on a changed result. Every recorded float of every
reference is moved by one unit in the last place and the comparison passes; one value moved in
its fourth significant digit and it fails. Charts are compared by a digest of their spec, so
the digest itself must be blind to the last bit and see the fourth digit.
"""
import copy
import math
import re

import nbformat
import pytest

from chapter_outputs import REFERENCES, chapters, differences
from specbench.report.charts import spec_digest

FLOAT = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")


def _references():
    return [REFERENCES / f"{c.stem}.ipynb" for c in chapters()]


def _map_text(notebook, edit):
    """``notebook`` with ``edit`` applied to every recorded text output (one string each)."""
    out = copy.deepcopy(notebook)
    for cell in out.cells:
        for output in cell.get("outputs", []):
            for mime, value in output.get("data", {}).items():
                if isinstance(value, (str, list)) and mime.endswith(("plain", "html")):
                    output["data"][mime] = edit("".join(value) if isinstance(value, list)
                                                else value)
            if "text" in output:
                output["text"] = edit(output["text"])
    return out


def _one_ulp(match):
    value = float(match.group())
    return repr(math.nextafter(value, math.inf))


@pytest.mark.parametrize("reference", _references(), ids=lambda p: p.stem)
def test_every_float_moved_by_one_ulp_still_equals_its_reference(reference):
    original = nbformat.read(reference, 4)
    moved = _map_text(original, lambda text: FLOAT.sub(_one_ulp, text))
    assert differences(moved, original) == []


def test_a_change_in_the_fourth_significant_digit_fails():
    for reference in _references():
        original = nbformat.read(reference, 4)
        found = []

        def bump_first(text, found=found):
            def bump(match):
                if found:
                    return match.group()
                value = float(match.group())
                if value == 0:
                    return match.group()
                found.append(value)
                return repr(value * (1 + 2e-3))
            return FLOAT.sub(bump, text)

        changed = _map_text(original, bump_first)
        if found:
            assert differences(changed, original), reference.name
            return
    pytest.fail("no reference records a float")


def _spec(scale: float = 1.0, ulp: bool = False) -> dict:
    values = [{"x": i * 0.1 * scale, "y": 9.341246887026799 * scale} for i in range(1, 5)]
    if ulp:
        values = [{k: math.nextafter(v, math.inf) for k, v in row.items()} for row in values]
    name = "data-" + ("a" if ulp else "b") * 32     # altair names datasets by a hash of values
    return {"data": {"name": name}, "datasets": {name: values}, "mark": "point",
            "encoding": {"x": {"field": "x", "type": "quantitative"}}}


def test_a_chart_digest_ignores_the_last_bit_and_sees_the_fourth_digit():
    assert spec_digest(_spec()) == spec_digest(_spec(ulp=True))
    assert spec_digest(_spec()) != spec_digest(_spec(scale=1.001))


def test_every_reference_names_the_cpu_that_wrote_it():
    for reference in _references():
        written_on = nbformat.read(reference, 4).metadata.get("specbench", {}).get("written_on")
        assert written_on and written_on.get("cpu_model"), (
            f"{reference.name}: no metadata.specbench.written_on (run `make references`)")


def test_no_reference_holds_an_error():
    """A figure that raised (altair's row limit, a missing value) is shown as a traceback and
    the build goes on: the reference must never freeze one."""
    for reference in _references():
        for cell in nbformat.read(reference, 4).cells:
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            assert not errors, f"{reference.name}: {errors[0]['ename']} in a cell's outputs"


def test_the_reference_writer_names_a_cell_that_raised_and_does_not_freeze_it():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "scripts" / "update_references.py"
    spec = importlib.util.spec_from_file_location("update_references", path)
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("chart()")])
    assert writer.raised(notebook) == []
    notebook.cells[0].outputs = [nbformat.v4.new_output(
        "error", ename="MaxRowsError", evalue="5000 rows\nmore", traceback=[])]
    assert writer.raised(notebook) == ["cell 0: MaxRowsError: 5000 rows"]
