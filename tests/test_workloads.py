import pytest

from specbench.measure.workloads import builtin as workloads


@pytest.mark.parametrize("workload", ["repeat", "open"])
def test_both_workloads_share_the_history_and_differ_in_the_request(workload):
    msgs = workloads.messages(workload, 1)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    other = workloads.messages("open" if workload == "repeat" else "repeat", 1)
    assert msgs[:2] == other[:2]            # same passage, same first turn
    assert msgs[2:] != other[2:]


def test_repeat_reply_is_primed_with_the_passage_start():
    msgs = workloads.messages("repeat", 0)
    passage = msgs[1]["content"]
    assert passage.startswith(msgs[-1]["content"])
    assert msgs[0]["content"].startswith(passage)


def test_batch_requests_use_different_passages():
    firsts = {workloads.messages("repeat", i)[1]["content"][:40] for i in range(4)}
    assert len(firsts) == 4
    assert workloads.messages("repeat", 4) == workloads.messages("repeat", 0)


def test_sampling_is_greedy_and_open_is_penalised():
    assert workloads.sampling("repeat") == {"temperature": 0.0, "repetition_penalty": 1.0}
    assert workloads.sampling("open")["temperature"] == 0.0
    assert workloads.sampling("open")["repetition_penalty"] > 1.0


def test_describe_hashes_every_text():
    d = workloads.describe()
    assert set(d["passages_sha256"]) == set(workloads.PASSAGES)
    assert all(len(h) == 64 for h in d["passages_sha256"].values())


def test_unknown_workload():
    with pytest.raises(ValueError, match="unknown workload 'chat'"):
        workloads.messages("chat", 0)
