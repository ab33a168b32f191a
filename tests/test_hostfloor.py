import sqlite3

import pandas as pd
import pytest

from specbench.measure import hostfloor as hf


@pytest.mark.parametrize("name, family", [
    ("aten::addmm", "matmul"), ("aten::mm", "matmul"), ("aten::linear", "matmul"),
    ("_C::onednn_mm", "matmul"), ("_C_cpu::paged_attention_v1", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("_C::rms_norm", "normalisation"), ("_C::fused_add_rms_norm", "normalisation"),
    ("_C::silu_and_mul", "activation"), ("_C::rotary_embedding", "rotary"),
    ("aten::embedding", "embedding"), ("aten::argmax", "sampling"),
    ("aten::softmax", "sampling"), ("aten::add", "elementwise"), ("aten::mul_", "elementwise"),
    ("aten::copy_", hf.HOST_FAMILY), ("aten::empty", hf.HOST_FAMILY),
    ("aten::index_select", hf.HOST_FAMILY), ("aten::cat", hf.HOST_FAMILY),
    ("aten::to", hf.HOST_FAMILY), ("aten::view", hf.HOST_FAMILY),
])
def test_operator_classification(name, family):
    assert hf.classify(name) == family


def test_differencing_recovers_a_known_step():
    # Synthetic trace: a fixed per-call cost (prefill, warmup, load) of 500 ms wall and 300 ms
    # compute, then 7 ms per step of which 4 ms compute: differencing must return 7/4/3.
    def trace(n):
        steps = n - 1
        return hf.StepProfile(n, 500 + 7 * steps + 13.0,
                              {"matmul": 250 + 3 * steps, "attention": 50 + 1 * steps,
                               hf.HOST_FAMILY: 200 + 3 * steps})
    d = hf.difference(trace(1), trace(513))
    assert d["steps"] == 512
    assert d["wall_ms"] == pytest.approx(7.0) and d["compute_ms"] == pytest.approx(4.0)
    assert d["host_ms"] == pytest.approx(3.0) and d["host_share"] == pytest.approx(3 / 7)
    assert d["families_ms"]["matmul"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="more tokens"):
        hf.difference(trace(8), trace(8))


def test_decompose_takes_medians_over_repetitions():
    steps, fams = [], []
    for rep, jitter in enumerate([0.0, 5.0, -5.0]):
        for n, wall, comp in [(1, 100 + jitter, 60), (11, 200 + jitter, 120)]:
            steps.append({"model": "m", "tokens": n, "rep": rep, "wall_ms": wall,
                          "compute_ms": comp, "unprofiled_wall_ms": wall - 1})
            fams += [{"model": "m", "tokens": n, "rep": rep, "family": "matmul", "self_ms": comp},
                     {"model": "m", "tokens": n, "rep": rep, "family": hf.HOST_FAMILY,
                      "self_ms": wall - comp}]
    per_step, families = hf.decompose(pd.DataFrame(steps), pd.DataFrame(fams))
    row = per_step.iloc[0]
    assert row["wall_ms"] == pytest.approx(10.0) and row["compute_ms"] == pytest.approx(6.0)
    assert row["host_share"] == pytest.approx(0.4)
    by_family = families.set_index("family")
    assert by_family.loc["matmul", "share"] == pytest.approx(6 / 10)
    assert by_family.loc[hf.OUTSIDE_OPERATORS, "ms"] == pytest.approx(0.0)
    assert by_family["share"].sum() == pytest.approx(1.0)


def test_nsys_command_traces_the_process_tree():
    cmd = hf.nsys_command("prof", ["python", "x.py"])
    assert cmd[:2] == ["nsys", "profile"] and "--trace-fork-before-exec=true" in cmd
    assert "--cuda-graph-trace=node" in cmd and cmd[-2:] == ["python", "x.py"]
    assert "gpukernsum" in hf.nsys_stats_command("r.nsys-rep", "p", legacy=True)
    assert "cuda_gpu_kern_sum" in hf.nsys_stats_command("r.nsys-rep", "p")


def test_kernel_summary_csv_current_and_legacy(fixtures):
    assert hf.read_kernel_summary_csv(fixtures / "nsys_cuda_gpu_kern_sum.csv") == \
        pytest.approx((4_200_000 + 1_800_000 + 400_000) / 1e6)
    assert hf.read_kernel_summary_csv(fixtures / "nsys_gpukernsum_legacy.csv") == \
        pytest.approx((3_000_000 + 1_000_000) / 1e6)


def test_malformed_kernel_summary_names_the_file(tmp_path):
    bad = tmp_path / "broken_kern_sum.csv"
    bad.write_text("Time,Instances,Name\n1,2,x\n")
    with pytest.raises(hf.NsysFormatError, match="broken_kern_sum.csv"):
        hf.read_kernel_summary_csv(bad)
    worse = tmp_path / "garbled.csv"
    worse.write_text("Time (%),Total Time (ns),Instances,Name\n50.0,lots,3,gemm\n")
    with pytest.raises(hf.NsysFormatError, match=r"garbled.csv: line 2"):
        hf.read_kernel_summary_csv(worse)


def test_sqlite_export(tmp_path):
    path = tmp_path / "report.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, "
                   "shortName INTEGER, demangledName INTEGER)")
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "gemm"), (2, "flash_fwd")])
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?)",
                       [(0, 2_000_000, 1, 1), (3_000_000, 3_500_000, 2, 2)])
    assert hf.read_kernel_sqlite(path) == pytest.approx(2.5)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(hf.NsysFormatError, match="junk.sqlite"):
        hf.read_kernel_sqlite(junk)
