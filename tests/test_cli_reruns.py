"""`kz eval` and `kz sample` run after run, as `kz` in a subprocess: a re-run evaluates again the candidates
whose code changed (and only those), `--only` picks problems of a suite by name with their levels, the run's
output says per problem why one was left out of the scores, and sampling interrupted before its first
completion leaves no empty file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kz_suites import BUILTIN_SUITE
from kzcore.jsonl import read_jsonl
from kzcore.results import read_results
from kzcore.sampling import sample_candidates
from kzcore.types import Problem, Status
from tests.test_cli_subprocess import error_line, kz

EVAL = ["--language", "python", "--trials", "1", "--workers", "1", "--device", "cpu"]


def echo(name: str, level: int = 1) -> str:
    """A correct "python"-language solution: the problem's own Model, renamed."""
    return (BUILTIN_SUITE / f"level{level}" / f"{name}.py").read_text().replace("class Model(", "class ModelNew(")


def verdicts(out: Path) -> dict[str, Status]:
    return {r.key: r.status for r in read_results(out)}


def line_with(text: str, output: str) -> str:
    (line,) = [line for line in output.splitlines() if text in line]
    return line


def test_a_fixed_solution_is_evaluated_again(tmp_path, own_workers):
    solutions, out = tmp_path / "solutions", tmp_path / "r.jsonl"
    solutions.mkdir()
    relu = solutions / "1_ReLU.py"
    relu.write_text(echo("1_ReLU").replace("return torch.relu(x)", "return torch.relu(x) * 2"))  # wrong
    (solutions / "3_Sigmoid.py").write_text(echo("3_Sigmoid"))
    args = ["eval", "--problems", "builtin:1", "--solutions", str(solutions), "--out", str(out), *EVAL]
    first = kz(*args)
    assert first.returncode == 0, first.stderr
    assert verdicts(out) == {"level1/1_ReLU#python#0": Status.INCORRECT, "level1/3_Sigmoid#python#0": Status.CORRECT}
    # 25 of the suite's 27 level-1 problems have no candidate: ten are named, and the line says how many more
    assert line_with("have no candidate", first.stderr).endswith(", … and 15 more")

    relu.write_text(echo("1_ReLU"))  # the user fixes it and runs the same command
    second = kz(*args)
    assert second.returncode == 0, second.stderr
    changed = line_with("changed since their result", second.stderr)
    assert changed.startswith("1 candidate(s)") and changed.endswith("evaluating them again: level1/1_ReLU#python#0")
    assert "1 result(s) already in" in second.stderr and "evaluating the remaining 1" in second.stderr
    assert verdicts(out) == {"level1/1_ReLU#python#0": Status.CORRECT, "level1/3_Sigmoid#python#0": Status.CORRECT}
    (stale,) = [row for row in read_jsonl(out) if row["type"] == "stale"]  # the file says what was replaced
    assert stale["key"] == "level1/1_ReLU#python#0" and stale["status"] == "incorrect"
    assert stale["code_hash"] != stale["replaced_by"]
    (all_row,) = [line for line in second.stdout.splitlines() if line.strip("│ ").startswith("all")]
    assert [cell.strip() for cell in all_row.split("│")[2:5]] == ["27", "2", "2"]

    report = kz("report", str(out))  # the report reads the newest verdict: no incorrect left
    assert report.returncode == 0, report.stderr
    assert [cell.strip() for cell in line_with("│ correct ", report.stdout).split("│")[1:3]] == ["correct", "2"]
    assert "incorrect" not in report.stdout

    third = kz(*args)  # nothing changed: nothing is evaluated
    assert third.returncode == 0, third.stderr
    assert "evaluating the remaining 0" in third.stderr and "changed since" not in third.stderr


def test_results_that_do_not_name_their_code_are_evaluated_again(tmp_path, own_workers):
    solutions, out = tmp_path / "solutions", tmp_path / "r.jsonl"
    solutions.mkdir()
    (solutions / "1_ReLU.py").write_text(echo("1_ReLU"))
    args = ["eval", "--problems", "builtin:1", "--only", "1_ReLU", "--solutions", str(solutions), "--out", str(out)]
    assert kz(*args, *EVAL).returncode == 0
    rows = read_jsonl(out)  # as a kz that recorded no code hash wrote it
    out.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "code_hash"}) + "\n" for row in rows))
    again = kz(*args, *EVAL)
    assert again.returncode == 0, again.stderr
    assert "1 result(s) in" in again.stderr and "do not say which code they judged" in again.stderr
    assert "already in" not in again.stderr  # none is reused
    assert [row["type"] for row in read_jsonl(out)] == ["run", "result", "stale", "run", "result"]
    (result,) = read_results(out)
    assert result.status is Status.CORRECT and result.code_hash


def test_eval_only_evaluates_the_named_problems_at_their_levels(tmp_path, own_workers):
    solutions, out = tmp_path / "solutions", tmp_path / "r.jsonl"
    (solutions / "level1").mkdir(parents=True)
    (solutions / "level1" / "3_Sigmoid.py").write_text(echo("3_Sigmoid"))
    (solutions / "level1" / "1_ReLU.py").write_text(echo("1_ReLU"))
    args = ["eval", "--problems", "builtin", "--solutions", str(solutions), "--out", str(out), *EVAL]
    proc = kz(*args, "--only", "3_Sigmoid")
    assert proc.returncode == 0, proc.stderr
    (result,) = read_results(out)
    assert (result.problem, result.level, result.status) == ("3_Sigmoid", 1, Status.CORRECT)
    assert "no candidate" not in proc.stderr  # the suite's other problems are not part of this run
    (all_row,) = [line for line in proc.stdout.splitlines() if line.strip("│ ").startswith("all")]
    assert [cell.strip() for cell in all_row.split("│")[2:5]] == ["1", "1", "1"]

    by_key = kz(*args, "--only", "level1/1_ReLU, 3_Sigmoid")  # a level/name key too; the earlier result is kept
    assert by_key.returncode == 0, by_key.stderr
    assert "1 result(s) already in" in by_key.stderr
    assert verdicts(out) == {"level1/1_ReLU#python#0": Status.CORRECT, "level1/3_Sigmoid#python#0": Status.CORRECT}

    missing = kz(*args, "--only", "3_Sigmoid,99_Nope")
    assert missing.returncode == 1
    assert error_line(missing) == "kz: error: --only: no problem '99_Nope' in builtin"


def test_sample_only_asks_for_the_named_problems(tmp_path):
    out = tmp_path / "c.jsonl"
    args = ["sample", "--policy", "pylang-echo", "--problems", "builtin", "--language", "python", "--out", str(out)]
    proc = kz(*args, "--only", "level2/1_Gemm_BiasAdd_ReLU,3_Sigmoid")
    assert proc.returncode == 0, proc.stderr
    assert "2 completions for 2 problems" in proc.stdout
    rows = sorted((row["level"], row["problem"]) for row in read_jsonl(out))
    assert rows == [(1, "3_Sigmoid"), (2, "1_Gemm_BiasAdd_ReLU")]
    missing = kz(*args, "--only", "3_sigmoid")
    assert missing.returncode == 1
    assert error_line(missing) == "kz: error: --only: no problem '3_sigmoid' in builtin"
    assert len(read_jsonl(out)) == 2


SHRUNK_SOFTMAX = '''"""Softmax over rows; its small size has one column, where every output is 1."""

import torch
from torch import nn

batch_size = 4
dim = 8


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


KZ_SIZES = {"small": {"batch_size": 2, "dim": 1}}
'''


def test_a_problem_left_out_of_the_scores_is_named_with_why_and_what_to_do(tmp_path, own_workers):
    problems, solutions, out = tmp_path / "problems" / "level1", tmp_path / "solutions", tmp_path / "r.jsonl"
    problems.mkdir(parents=True)
    solutions.mkdir()
    (problems / "1_ShrunkSoftmax.py").write_text(SHRUNK_SOFTMAX)
    (solutions / "1_ShrunkSoftmax.py").write_text(SHRUNK_SOFTMAX.replace("class Model(", "class ModelNew("))
    proc = kz("eval", "--problems", str(problems.parent), "--solutions", str(solutions), "--out", str(out), *EVAL)
    assert proc.returncode == 0, proc.stderr
    (result,) = read_results(out)
    assert result.problem_degenerate and result.size == "small"
    line = line_with("level1/1_ShrunkSoftmax: left out of the scores", proc.stdout).strip()
    assert line == (
        "level1/1_ShrunkSoftmax: left out of the scores, the problem check failed at size small on cpu: "
        f"{result.problem_degenerate}; run it at full size on a GPU, or pass --include-degenerate to count it"
    )

    report = kz("report", str(out))  # the same line from the results file
    assert line_with("level1/1_ShrunkSoftmax: left out", report.stdout).strip() == line
    counted = kz("report", str(out), "--include-degenerate")
    assert counted.returncode == 0 and "left out of the scores" not in counted.stdout


class InterruptedPolicy:
    name = "interrupted"

    def generate(self, prompts, params):
        raise KeyboardInterrupt  # Ctrl-C while the first batch is being generated


def test_ctrl_c_before_the_first_completion_leaves_no_empty_file(tmp_path):
    problem = Problem(name="1_ReLU", level=1, source=(BUILTIN_SUITE / "level1" / "1_ReLU.py").read_text())
    out = tmp_path / "c.jsonl"
    with pytest.raises(KeyboardInterrupt):
        sample_candidates(InterruptedPolicy(), [problem], "triton", params=None, out=out)
    assert not out.exists()
    out.write_text("")  # a file that was there before is the user's: kept, even empty
    with pytest.raises(KeyboardInterrupt):
        sample_candidates(InterruptedPolicy(), [problem], "triton", params=None, out=out)
    assert out.exists()


def test_a_problem_the_check_reached_no_verdict_on_is_named_recorded_and_checked_again(tmp_path, own_workers):
    """A problem whose reference does not run gets no verdict from the problem check: it is not flagged (its
    candidates' results say what happened), and `kz eval` says so on one line and records it in the run header,
    next to the flagged ones, instead of counting it silently. Run again once the reference runs (here a file
    it needs appears; its source is unchanged, so no result is evaluated again), the command checks that
    problem again and its saved results take the verdict: this one is degenerate at small size, so they leave
    the scores."""
    from kzcore.results import read_headers

    problems, solutions, out = tmp_path / "problems" / "level1", tmp_path / "solutions", tmp_path / "r.jsonl"
    problems.mkdir(parents=True)
    solutions.mkdir()
    needed = tmp_path / "needed"
    late = SHRUNK_SOFTMAX.replace(
        "        return torch.softmax(x, dim=1)",
        f"        if not __import__('os').path.exists({str(needed)!r}):\n"
        "            raise RuntimeError('no reference here')\n"
        "        return torch.softmax(x, dim=1)",
    )
    assert late != SHRUNK_SOFTMAX
    (problems / "1_Late.py").write_text(late)
    (problems / "2_ShrunkSoftmax.py").write_text(SHRUNK_SOFTMAX)
    (solutions / "1_Late.py").write_text(SHRUNK_SOFTMAX.replace("class Model(", "class ModelNew("))
    (solutions / "2_ShrunkSoftmax.py").write_text(SHRUNK_SOFTMAX.replace("class Model(", "class ModelNew("))
    args = ("eval", "--problems", str(problems.parent), "--solutions", str(solutions), "--out", str(out), *EVAL)
    proc = kz(*args)
    assert proc.returncode == 0, proc.stderr
    line = " ".join(proc.stderr.split())  # rich wraps the console's lines
    assert "the problem check reached no verdict on 1 problem(s)" in line
    assert "level1/1_Late (does not run: RuntimeError: no reference here" in line
    (header,) = read_headers(out)
    assert header["problem_check"]["checked"] == ["level1/1_Late", "level1/2_ShrunkSoftmax"]
    assert list(header["problem_check"]["unchecked"]) == ["level1/1_Late"]
    assert list(header["problem_check"]["flagged"]) == ["level1/2_ShrunkSoftmax"]
    by = {r.problem: r for r in read_results(out)}
    assert not by["1_Late"].problem_degenerate and by["2_ShrunkSoftmax"].problem_degenerate
    assert "level1/1_Late: left out" not in proc.stdout
    report = kz("report", str(out))
    assert "1 problem(s) counted without a problem-check verdict" in report.stdout and "level1/1_Late" in report.stdout

    needed.write_text("")
    again = kz(*args)
    assert again.returncode == 0, again.stderr
    assert "no verdict" not in again.stderr and "2 result(s) already in" in " ".join(again.stderr.split())
    headers = read_headers(out)
    assert len(headers) == 2 and headers[1]["problem_check"]["checked"] == ["level1/1_Late"]
    assert list(headers[1]["problem_check"]["flagged"]) == ["level1/1_Late"]
    late_result = {r.problem: r for r in read_results(out)}["1_Late"]
    assert late_result.problem_degenerate and late_result.status is by["1_Late"].status  # same verdict, flagged
    assert "level1/1_Late: left out of the scores" in again.stdout
    assert "without a problem-check verdict" not in kz("report", str(out)).stdout

    third = kz(*args)  # nothing left unvouched: no pool, no new header
    assert third.returncode == 0 and len(read_headers(out)) == 2
