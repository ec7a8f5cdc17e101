"""kzcore.jsonl: torn last lines skipped when read and cut before appending, malformed lines reported with
file:line, and the results and completions files that go through it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kzcore.jsonl import append_jsonl, read_jsonl, repair_tail
from kzcore.policy import Completion, SamplingParams
from kzcore.problems import load_problems
from kzcore.results import ResultsWriter, read_headers, read_results
from kzcore.sampling import read_completions, sample_candidates
from kzcore.types import EvalResult, Status


def lines_of(path: Path) -> list[dict]:
    text = path.read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]  # every line a whole JSON object


def torn(path: Path, rows: list[dict], tail: str = '{"type": "result", "prob') -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


def test_read_skips_a_torn_last_line_and_says_where(tmp_path):
    path = torn(tmp_path / "r.jsonl", [{"a": 1}, {"a": 2}])
    skipped = []
    assert read_jsonl(path, on_skip=skipped.append) == [{"a": 1}, {"a": 2}]
    assert len(skipped) == 1 and skipped[0].startswith(f"{path}:3: torn last line")


def test_read_reports_malformed_middle_lines_with_their_line_numbers(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\nnot json\n\n[1, 2]\n{"a": 2}\n')
    skipped = []
    assert read_jsonl(path, on_skip=skipped.append) == [{"a": 1}, {"a": 2}]
    assert [m.split(": ")[0] for m in skipped] == [f"{path}:2", f"{path}:4"]
    assert all("not a JSON object" in m for m in skipped)


def test_read_keeps_a_whole_last_line_without_newline(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}')  # written by hand: complete, just no final newline
    skipped = []
    assert read_jsonl(path, on_skip=skipped.append) == [{"a": 1}, {"a": 2}]
    assert skipped == []
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_skips_go_to_the_logger_without_a_callback(tmp_path, caplog):
    path = torn(tmp_path / "r.jsonl", [{"a": 1}])
    with caplog.at_level(logging.WARNING, logger="kzcore.jsonl"):
        assert read_jsonl(path) == [{"a": 1}]
    assert f"{path}:2: torn last line" in caplog.text


def test_repair_tail_cuts_a_torn_line_and_completes_a_whole_one(tmp_path):
    path = torn(tmp_path / "r.jsonl", [{"a": 1}])
    dropped = []
    assert repair_tail(path, on_skip=dropped.append) is True
    assert path.read_text() == '{"a": 1}\n'
    assert len(dropped) == 1 and dropped[0].startswith(f"{path}:2: torn last line dropped")
    assert repair_tail(path, on_skip=dropped.append) is False  # already whole: untouched
    path.write_text('{"a": 1}\n{"a": 2}')
    assert repair_tail(path, on_skip=dropped.append) is True
    assert path.read_text() == '{"a": 1}\n{"a": 2}\n' and len(dropped) == 1
    one = tmp_path / "one.jsonl"
    one.write_text('{"cut')
    assert repair_tail(one, on_skip=dropped.append) is True and one.read_text() == ""


def test_append_after_a_torn_line_leaves_valid_jsonl(tmp_path):
    path = torn(tmp_path / "r.jsonl", [{"a": 1}])
    append_jsonl(path, [{"a": 2}, {"a": 3}], on_skip=lambda m: None)
    assert lines_of(path) == [{"a": 1}, {"a": 2}, {"a": 3}]


def result(problem: str, status: Status = Status.CORRECT) -> EvalResult:
    return EvalResult(problem=problem, language="python", level=1, sample=0, status=status)


def test_resuming_a_results_file_with_a_torn_line(tmp_path):
    """The bug: the new run's header was appended to the torn line, so both were lost."""
    path = tmp_path / "results.jsonl"
    writer = ResultsWriter(path)
    writer.write_header({"type": "run", "n": 1})
    writer.write(result("1_ReLU"))
    writer.close()
    with path.open("a") as f:
        f.write(json.dumps({"type": "result", "problem": "2_Tanh"})[:25])  # the process was killed mid-write
    dropped = []
    writer = ResultsWriter(path, on_skip=dropped.append)
    writer.write_header({"type": "run", "n": 2})
    writer.write(result("3_Sigmoid", Status.INCORRECT))
    writer.close()
    rows = lines_of(path)
    assert [r["type"] for r in rows] == ["run", "result", "run", "result"]
    assert len(dropped) == 1 and ":3: torn last line dropped" in dropped[0]
    assert [h["n"] for h in read_headers(path)] == [1, 2]
    assert sorted(r.problem for r in read_results(path)) == ["1_ReLU", "3_Sigmoid"]


class ListPolicy:
    name = "list"

    def generate(self, prompts, params):
        return [[Completion(text=f"answer {i}", prompt_index=i, sample_index=0)] for i in range(len(prompts))]

    def close(self):
        pass


def test_sampling_resumes_onto_a_torn_completions_file(tmp_path, plugins):
    plugins("kz_pylang")
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "3_Sigmoid")]
    out = tmp_path / "c.jsonl"
    sample_candidates(ListPolicy(), problems[:1], "python", SamplingParams(n=1), out)
    with out.open("a") as f:
        f.write('{"problem": "3_Sigmoid", "lev')
    cands = sample_candidates(ListPolicy(), problems, "python", SamplingParams(n=1), out)
    assert sorted(c.problem for c in cands) == ["1_ReLU", "3_Sigmoid"]
    assert [r["problem"] for r in lines_of(out)] == ["1_ReLU", "3_Sigmoid"]
    assert len(read_completions(out)) == 2


def test_a_record_stored_gzipped_reads_as_the_plain_file(tmp_path):
    """Committed experiment records may be gzipped to keep the tree small: readers asked for X.jsonl read
    X.jsonl.gz when only that exists, globbing finds each record once, and appending beside it is refused
    (the appended plain file would hide the record)."""
    import gzip

    from kzcore.jsonl import stored, stored_glob

    rows = [{"type": "x", "i": i} for i in range(3)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "results-cuda.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "results-triton.jsonl").write_text(text)
    (tmp_path / "results-both.jsonl").write_text(text)
    (tmp_path / "results-both.jsonl.gz").write_bytes(gzip.compress(b'{"type": "old"}\n'))
    assert read_jsonl(tmp_path / "results-cuda.jsonl") == rows
    assert read_jsonl(tmp_path / "results-cuda.jsonl.gz") == rows
    assert stored(tmp_path / "results-both.jsonl") == tmp_path / "results-both.jsonl"  # the plain one wins
    names = [p.name for p in stored_glob(tmp_path, "results-*.jsonl")]
    assert names == ["results-both.jsonl", "results-cuda.jsonl.gz", "results-triton.jsonl"]
    with pytest.raises(ValueError, match="finished record"):
        append_jsonl(tmp_path / "results-cuda.jsonl", [{"i": 9}])
    assert not (tmp_path / "results-cuda.jsonl").exists()
