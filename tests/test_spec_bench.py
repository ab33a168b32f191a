"""Spec-Bench and operator prompt files as workload sources (no engine)."""
import json
import subprocess
import sys

import pytest

from specbench.measure.workloads import spec_bench

from specbench.measure import workloads
from specbench.store.runs import REPO_ROOT
from specbench.measure.workloads.operator_file import FileSource, read_prompts

needs_file = pytest.mark.skipif(not spec_bench.default_path().exists(),
                                reason="Spec-Bench question file not present")


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_selection_is_deterministic_and_spread(tmp_path):
    rows = [{"question_id": i, "category": "qa", "turns": [f"question {i}"]} for i in range(1, 41)]
    path = _write(tmp_path / "q.jsonl", rows)
    first = [r.id for r in spec_bench.SpecBenchSource("qa", path).candidates()][:8]
    again = [r.id for r in spec_bench.SpecBenchSource("qa", path).candidates()][:8]
    assert first == again
    assert first != [f"q{i}" for i in range(1, 9)]          # not the lowest ids


def test_multi_turn_takes_sub_categories_in_turn(tmp_path):
    subs = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
            "humanities"]
    rows = [{"question_id": 81 + 10 * k + j, "category": s, "turns": ["a", "b"]}
            for k, s in enumerate(subs) for j in range(10)]
    source = spec_bench.SpecBenchSource("multi-turn", _write(tmp_path / "q.jsonl", rows))
    ids = [int(r.id[1:]) for r in source.candidates()[:8]]
    assert len({(i - 81) // 10 for i in ids}) == 8         # one of each sub-category
    assert source.candidates()[0].messages[0]["content"] == "a"   # first turn only


@pytest.mark.parametrize("line, message", [
    ("not json", "line 2: not valid JSON"),
    ('{"question_id": 5, "category": "qa"}', "line 2: field 'turns'"),
    ('{"question_id": "x", "category": "qa", "turns": ["t"]}', "line 2: field 'question_id'"),
])
def test_malformed_spec_bench_lines_are_named(tmp_path, line, message):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question_id": 1, "category": "qa", "turns": ["t"]}\n' + line + "\n")
    with pytest.raises(ValueError, match=message):
        spec_bench.SpecBenchSource("qa", path).candidates()


def test_unknown_category_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="unknown Spec-Bench category 'poetry'"):
        workloads.source("specbench:poetry")
    with pytest.raises(FileNotFoundError, match="Spec-Bench question file not found"):
        spec_bench.SpecBenchSource("qa", tmp_path / "none.jsonl").candidates()


@needs_file
def test_the_real_file_has_six_categories_of_eighty():
    for category in spec_bench.CATEGORIES:
        assert len(spec_bench.SpecBenchSource(category).candidates()) == 80


@needs_file
def test_the_probe_category_is_the_other_one_nearest_in_prompt_length():
    assert spec_bench.nearest_in_length("rag") == "summarization"      # articles, both
    assert spec_bench.nearest_in_length("summarization") == "rag"
    assert spec_bench.nearest_in_length("qa") not in ("qa", "rag", "summarization")


@needs_file
@pytest.mark.data   # reads every tracked file, runs/ included
def test_no_spec_bench_prompt_text_is_tracked():
    """Runs record question ids and hashes; the prompt texts never enter the repository."""
    frags = []
    for line in spec_bench.default_path().read_text().splitlines():
        text = " ".join(json.loads(line)["turns"][0].split())
        if len(text) >= 100:
            frags.append(text[30:80])
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True,
                             text=True).stdout.split()
    for name in tracked:
        try:
            text = " ".join((REPO_ROOT / name).read_text(errors="ignore").split())
        except (OSError, IsADirectoryError):
            continue
        assert not any(f in text for f in frags), f"{name} holds Spec-Bench prompt text"


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "hi"}\nnot json\n', "line 2: not valid JSON"),
    ('{"prompt": "hi"}\n{"text": "no prompt"}\n', "line 2: field 'prompt'"),
    ('{"prompt": "hi", "output_tokens": 0}\n', "line 1: field 'output_tokens'"),
    ('[1, 2]\n', "line 1: expected a JSON object"),
    ("\n\n", "no prompt in the file"),
])
def test_workload_file_errors_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "mine.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_prompts(path)


def test_workload_file_output_tokens_win(tmp_path):
    path = _write(tmp_path / "mine.jsonl", [{"prompt": "a"}, {"prompt": "b", "output_tokens": 7}])
    requests = FileSource(path).candidates()
    assert [r.max_tokens for r in requests] == [None, 7]
    assert requests[1].messages == ({"role": "user", "content": "b"},)


@pytest.mark.parametrize("content", ["", '{"prompt": "a"}\n{"x": 1}\n'])
def test_cli_rejects_a_bad_workload_file_before_any_engine(tmp_path, content):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    out = subprocess.run([sys.executable, "-m", "specbench.cli.main", "sweep", "--workload-file",
                          str(path), "--root", str(tmp_path / "runs")],
                         capture_output=True, text=True)
    assert out.returncode == 2 and str(path) in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()
