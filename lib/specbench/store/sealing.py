"""What a sweep records of the sealed prediction it is judged against.

``specbench predict`` closes a 'prediction' run (its ``predictions.csv`` hashed in the
manifest) before the SKU's sweep starts; ``specbench sweep --judged-against RUN`` refuses any
run that is not such a closed prediction, and stores the record below in its manifest, so a
reader can check later that the sealed table is the one the sweep was judged against and that
it was closed before the sweep began (:mod:`specbench.derive.sealed`).
"""
from __future__ import annotations

from pathlib import Path

from specbench.store.runs import open_run

__all__ = ["sealed_record", "check_sku"]


def sealed_record(path: str | Path) -> dict:
    """The manifest record of a closed prediction run; a clear error for anything else."""
    run = open_run(Path(path))
    where = Path(path) / "manifest.json"
    if run.manifest["kind"] != "prediction":
        raise ValueError(f"{where}: field kind is {run.manifest['kind']!r}: --judged-against "
                         "takes a prediction run (made by `specbench predict`)")
    if not run.complete:
        raise ValueError(f"{where}: field status is {run.manifest['status']!r}: the prediction "
                         "was never closed, so it is not sealed")
    sha = run.manifest.get("files", {}).get("predictions.csv", {}).get("sha256")
    if not sha:
        raise ValueError(f"{where}: field files/predictions.csv missing: nothing was sealed")
    return {"run_id": run.run_id, "sku": run.sku, "predictions_sha256": sha,
            "sealed_at": run.manifest["finished_at"]}


def check_sku(record: dict, sku: str) -> None:
    """A sweep is judged only against a prediction made for its own SKU."""
    if record["sku"] != sku:
        raise ValueError(f"the sealed prediction {record['run_id']} is for SKU {record['sku']!r}, "
                         f"but this sweep measures {sku!r} (engine threads and dtype are part "
                         "of the SKU: set VLLM_CPU_OMP_THREADS_BIND and --dtype as for the "
                         "calibration)")
