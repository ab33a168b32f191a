"""Every run in this checkout's runs/ — the committed ones and any this machine added (`make
book`, a sweep) — keeps the benchmark contract: it opens (schema, checksums of its tables),
and a complete run states model hashes, engine version, hardware, dtype and code revision.
New runs are judged here, by their contract; the chapter references judge the committed store.
"""
import pytest

from specbench.store.runs import REPO_ROOT, load_runs

pytestmark = pytest.mark.data

STORE = REPO_ROOT / "runs"


def test_every_run_here_keeps_the_contract():
    runs = load_runs(STORE, include_incomplete=True)
    assert runs, f"{STORE}: no runs"
    for run in runs:
        m = run.manifest
        where = f"{run.path}/manifest.json"
        assert m["code"]["revision"], f"{where}: code.revision is empty"
        assert m["engine"]["version"], f"{where}: engine.version is empty"
        if m["kind"] in ("sweep", "microbench", "serving", "lossless", "hostfloor"):
            assert m.get("hardware"), f"{where}: no hardware block"
            assert m["model"]["tokenizer_sha256"], f"{where}: model.tokenizer_sha256 is empty"
        for name in m.get("files", {}):
            if name.endswith(".csv"):
                run.table(name)      # raises, naming the file, where a checksum disagrees


def test_runs_written_since_the_host_fingerprint_record_their_host():
    """Runs started after the manifest gained its host block (3 Dec 2026, 23:40 UTC) name the
    host and boot that measured them; older runs are grouped by SKU and period instead."""
    for run in load_runs(STORE, kind="sweep"):
        if run.manifest["started_at"] >= "2026-12-03T23:40":
            host = run.manifest.get("host") or {}
            assert host.get("boot_id") and host.get("host_id"), \
                f"{run.path}/manifest.json: field host: missing boot_id/host_id"
