"""Host identity and host sessions: the unit a calibration holds for (issue: the host as the
unit of evidence)."""
from pathlib import Path

from specbench.engine.hardware import host_fingerprint
from specbench.store.hosts import host_sessions, latest_per_session
from specbench.store.runs import Run


def _run(run_id, sku, started, finished, boot=None) -> Run:
    manifest = {"run_id": run_id, "sku": sku, "kind": "sweep", "started_at": started,
                "finished_at": finished}
    if boot:
        manifest["host"] = {"boot_id": boot, "machine_id": "m", "kernel": "k",
                            "hypervisor": "KVM", "host_id": boot[:12]}
    return Run(Path("/nonexistent") / sku / run_id, manifest)


def test_this_host_has_a_fingerprint():
    host = host_fingerprint()
    assert host["boot_id"] and host["kernel"] and len(host["host_id"]) == 12
    assert host_fingerprint() == host          # stable within one boot


def test_two_hosts_of_one_cpu_kind_are_two_sessions():
    """Same SKU, same day, different boots: two sessions, even an hour apart."""
    sku = "cpu-amd-epyc-f25m1-1t-float32"
    a = _run("a", sku, "2026-12-03T10:00:00+00:00", "2026-12-03T10:20:00+00:00", boot="1111aaaa-b")
    b = _run("b", sku, "2026-12-03T11:00:00+00:00", "2026-12-03T11:20:00+00:00", boot="2222bbbb-c")
    c = _run("c", sku, "2026-12-03T12:00:00+00:00", "2026-12-03T12:10:00+00:00", boot="1111aaaa-b")
    sessions = host_sessions([a, b, c])
    assert sessions["a"] != sessions["b"]
    assert sessions["a"] == sessions["c"]


def test_unfingerprinted_runs_group_by_sku_and_measuring_period():
    """Runs without a fingerprint: one session per SKU while runs follow within 12 hours of the
    previous one's end (the Zen 4 host measured from 30 Nov 23:42 to 1 Dec 07:04: one)."""
    zen4, zen3 = "cpu-amd-epyc-f25m17-1t-float32", "cpu-amd-epyc-f25m1-1t-float32"
    runs = [_run("m", zen4, "2026-11-30T23:42:15+00:00", "2026-11-30T23:42:24+00:00"),
            _run("s", zen4, "2026-12-01T05:33:44+00:00", "2026-12-01T07:04:25+00:00"),
            _run("later", zen4, "2026-12-02T07:05:00+00:00", "2026-12-02T07:30:00+00:00"),
            _run("other", zen3, "2026-12-01T05:40:00+00:00", "2026-12-01T06:00:00+00:00")]
    sessions = host_sessions(runs)
    assert sessions["m"] == sessions["s"]
    assert sessions["later"] != sessions["s"]          # a day later: another period
    assert sessions["other"] not in (sessions["m"], sessions["later"])  # another SKU


def test_each_host_session_takes_its_own_latest_microbenchmark():
    """The one rule for a session's kernels: its SKU's latest microbenchmark on that session,
    never another session's, whatever order the runs come in."""
    sku = "cpu-amd-epyc-f25m1-1t-float32"
    runs = [_run(rid, sku, f"2026-12-03T1{hour}:00:00+00:00", f"2026-12-03T1{hour}:05:00+00:00",
                 boot=boot) for rid, hour, boot in
            [("m2", 2, "1111aaaa-b"), ("m1", 0, "1111aaaa-b"), ("m3", 1, "2222bbbb-c")]]
    for run in runs:
        run.manifest["kind"] = "microbench"
    sessions = host_sessions(runs)
    latest = latest_per_session(runs, sessions)
    assert {key[1]: run.run_id for key, run in latest.items()} == {
        sessions["m1"]: "m2", sessions["m3"]: "m3"}
