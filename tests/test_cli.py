"""`kz` end to end: plugins, suite, eval, report, and one-line errors for bad input. Most commands run
in-process through kzcore.cli.main (with the test's plugin manager); `kz plugins` runs as a subprocess
where the installed entry points must be seen."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kz_suites import BUILTIN_SUITE
from kzcore.cli import main
from kzcore.problems import load_problems
from kzcore.results import ResultsWriter, read_headers, read_results
from kzcore.types import EvalResult, Status

SUITE = BUILTIN_SUITE
KZ = Path(sys.executable).with_name("kz")


@pytest.fixture
def wide(monkeypatch):
    """Rich sizes tables to $COLUMNS when not on a terminal; wide enough that no cell wraps."""
    monkeypatch.setenv("COLUMNS", "250")


def kz_subprocess(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KZ_")}  # no KZ_LOAD_PLUGINS="" guard
    environ.update(COLUMNS="250", PYTHONIOENCODING="utf-8", KZ_TEST_PLUGINS="1", **env)
    return subprocess.run([str(KZ), *args], capture_output=True, text=True, env=environ, timeout=120)


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert lines[0].startswith("kz: error: ")
    return lines[0]


def copy_problems(tmp_path: Path, names: list[str]) -> tuple[Path, Path]:
    problems, solutions = tmp_path / "problems" / "level1", tmp_path / "solutions" / "level1"
    problems.mkdir(parents=True)
    solutions.mkdir(parents=True)
    for name in names:
        shutil.copy(SUITE / "level1" / f"{name}.py", problems)
        shutil.copy(SUITE / "solutions" / "triton" / "level1" / f"{name}.py", solutions)
    return problems.parent, solutions.parent


def write_results(path: Path, results: list[EvalResult]) -> Path:
    writer = ResultsWriter(path)
    writer.write_header({"type": "run", "note": "written by a test"})
    for r in results:
        writer.write(r)
    writer.close()
    return path


# ----------------------------------------------------------------------------------------------------
# kz plugins
# ----------------------------------------------------------------------------------------------------


def test_plugins_lists_installed_entry_points():
    proc = kz_subprocess("plugins")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.count("│") >= 3}
    assert {"triton", "pylang", "suites", "kzcore.builtins.registry"} <= set(rows)
    assert "language triton" in rows["triton"] and "kz_register_languages" in rows["triton"]
    # a language plugin registers a Language object; the core's defaults of the pipeline hooks ask it
    assert "kz_load_candidate" not in rows["triton"] and "kz_load_candidate" in rows["kzcore.builtins.languages"]
    assert "language python" in rows["pylang"]
    assert "executor local" in rows["kzcore.builtins.registry"]
    assert "suite builtin" in rows["suites"] and "suite" not in rows["kzcore.builtins.registry"]


def test_plugins_respects_disable_env():
    proc = kz_subprocess("plugins", KZ_DISABLE_PLUGINS="pylang")
    assert proc.returncode == 0, proc.stderr
    assert "triton" in proc.stdout and "language triton" in proc.stdout
    assert "pylang" not in proc.stdout and "language python" not in proc.stdout


def test_plugins_in_process_shows_the_active_manager(plugins, capsys, wide):
    plugins("kz_triton")
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "kz_triton" in out and "language triton" in out
    assert "pylang" not in out  # the test guard keeps installed entry points out


# ----------------------------------------------------------------------------------------------------
# kz suite
# ----------------------------------------------------------------------------------------------------


def test_suite_list(capsys, wide):
    assert main(["suite", "list"]) == 0
    out = capsys.readouterr().out
    n1, n2 = len(load_problems("builtin:1")), len(load_problems("builtin:2"))
    (row,) = [line for line in out.splitlines() if "│ builtin" in line]
    assert str(SUITE) in row and f"level1: {n1}, level2: {n2}" in row


def test_suite_show_level(capsys, wide):
    assert main(["suite", "show", "builtin:1"]) == 0
    out = capsys.readouterr().out
    names = [p.name for p in load_problems("builtin:1")]
    for name in names:
        assert f"│ {name} " in out
    assert "1_Gemm_BiasAdd_ReLU" not in out  # level 2 is not shown
    assert out.count("full, small") == len(names)


def test_suite_show_problem_prints_source(capsys):
    assert main(["suite", "show", "builtin", "1_ReLU"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == (SUITE / "level1" / "1_ReLU.py").read_text().rstrip("\n")
    assert main(["suite", "show", "builtin", "level2/1_Gemm_BiasAdd_ReLU"]) == 0  # by key
    assert "class Model" in capsys.readouterr().out
    assert main(["suite", "show", "builtin", "99_Nope"]) == 1
    assert one_error_line(capsys.readouterr().err) == "kz: error: no problem '99_Nope' in builtin"


def test_suite_show_problem_prints_long_lines_verbatim(capsys, monkeypatch):
    # `kz suite show builtin NAME > problem.py` must reproduce the file, whatever the terminal width.
    monkeypatch.setenv("COLUMNS", "80")
    problem = max(load_problems("builtin"), key=lambda p: max(len(line) for line in p.source.splitlines()))
    assert max(len(line) for line in problem.source.splitlines()) > 80
    assert main(["suite", "show", "builtin", problem.key]) == 0
    assert capsys.readouterr().out.rstrip("\n") == problem.source.rstrip("\n")


# ----------------------------------------------------------------------------------------------------
# kz eval / kz report
# ----------------------------------------------------------------------------------------------------


def test_eval_and_report(plugins, tmp_path, capsys, own_workers):
    plugins("kz_triton")
    problems, solutions = copy_problems(tmp_path, ["1_ReLU", "3_Sigmoid"])
    out = tmp_path / "runs" / "r.jsonl"
    argv = ["eval", "--problems", str(problems), "--solutions", str(solutions), "--language", "triton"]
    argv += ["--out", str(out), "--trials", "2", "--workers", "1", "--timeout", "60"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "kzcore scores (pass@1, fast_p@1)" in captured.out
    (row,) = [line for line in captured.out.splitlines() if line.strip("│ ").startswith("all")]
    assert [cell.strip() for cell in row.split("│")[2:6]] == ["2", "2", "2", "100.0%"]
    assert f"results: {out}" in captured.out
    results = read_results(out)
    assert sorted((r.problem, r.status) for r in results) == [("1_ReLU", Status.CORRECT), ("3_Sigmoid", Status.CORRECT)]
    assert len(read_headers(out)) == 1 and read_headers(out)[0]["plugins"] == ["kz_suites", "kz_triton"]

    # running the same command again resumes: nothing is evaluated twice
    assert main(argv) == 0
    assert "2 result(s) already in" in capsys.readouterr().err
    assert sum(json.loads(line)["type"] == "result" for line in out.read_text().splitlines()) == 2

    # report on untimed (CPU) results: a table, and the verdicts per level (no speedup histogram)
    assert main(["report", str(out)]) == 0
    report = capsys.readouterr().out
    assert "kzcore scores" in report and "correct" in report
    assert f"plots: {out.with_suffix('.plots.png')} (verdicts per level)" in " ".join(report.split())


def test_report_writes_histogram_for_timed_results(tmp_path, capsys, wide):
    timed = [
        EvalResult(
            problem=f"{i}_P",
            level=1,
            language="triton",
            sample=0,
            status=Status.CORRECT,
            ref_ms=1.0,
            cand_ms=1.0 / s,
            speedup=s,
        )
        for i, s in enumerate([0.5, 1.5, 2.0, 3.0])
    ]
    timed.append(EvalResult(problem="9_Q", level=2, language="triton", sample=0, status=Status.INCORRECT))
    path = write_results(tmp_path / "timed.jsonl", timed)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    png = path.with_suffix(".plots.png")
    assert f"plots: {png} (verdicts per level, speedup histogram)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    custom = tmp_path / "plots" / "h.png"
    assert main(["report", str(path), "--plot", str(custom)]) == 0
    assert custom.read_bytes()[:4] == b"\x89PNG"
    assert "incorrect" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------
# bad input: one line on stderr, exit 1
# ----------------------------------------------------------------------------------------------------


def test_eval_unknown_language(plugins, tmp_path, capsys):
    plugins("kz_triton")
    problems, solutions = copy_problems(tmp_path, ["1_ReLU"])
    argv = ["eval", "--problems", str(problems), "--solutions", str(solutions), "--language", "nosuch"]
    assert main([*argv, "--out", str(tmp_path / "r.jsonl")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line == "kz: error: no plugin handles language 'nosuch'; installed languages: triton"
    assert not (tmp_path / "r.jsonl").exists()


def test_eval_unknown_language_with_suite_solutions(plugins, tmp_path, capsys):
    # The language is what is wrong, so the error must say which languages are installed, even when the
    # suite (naturally) ships no solutions in a language nobody installed.
    plugins("kz_triton")
    argv = ["eval", "--problems", "builtin:1", "--solutions", "builtin", "--language", "cuda"]
    assert main([*argv, "--out", str(tmp_path / "r.jsonl")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "installed languages: triton" in line


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--trials", "0"], "--trials must be >= 1: 0"),
        (["--timeout", "-1"], "--timeout must be > 0: -1.0"),
        (["--atol", "-0.5"], "--atol must be >= 0: -0.5"),
        (["--warmup", "-2"], "--warmup must be >= 0: -2"),
        (["--timed-check-share", "2"], "--timed-check-share must be <= 1: 2.0"),
    ],
)
def test_an_evaluator_option_out_of_range_is_a_usage_error_naming_it(plugins, tmp_path, capsys, option, message):
    """A negative --timeout once filed every candidate `timeout`, and --trials 0 ended in a traceback: an
    evaluator setting outside its range is refused before anything runs, by the option's flag."""
    plugins("kz_triton")
    argv = ["eval", "--problems", "builtin:1", "--solutions", "builtin", "--language", "triton", *option]
    assert main([*argv, "--out", str(tmp_path / "r.jsonl")]) == 2
    assert one_error_line(capsys.readouterr().err) == f"kz: error: {message}"
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    ("command", "option", "message"),
    [
        ("sample", ["-n", "0"], "argument -n: must be at least 1, got 0"),
        ("sample", ["--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
        ("sample", ["--top-p", "0"], "argument --top-p: must be above 0 and at most 1, got 0"),
        ("sample", ["--temperature", "-1"], "argument --temperature: must be at least 0, got -1"),
        ("sample", ["--max-new-tokens", "x"], "argument --max-new-tokens: not an integer: 'x'"),
        ("eval", ["--workers", "0"], "argument --workers: must be at least 1, got 0"),
    ],
)
def test_a_sampling_or_worker_count_out_of_range_is_refused_before_anything_loads(
    tmp_path, capsys, command, option, message
):
    """-n 0, --top-p 0 and --batch-size 0 once reached the policy and ended in a traceback after the model
    had loaded."""
    argv = [command, "--problems", "builtin:1", "--out", str(tmp_path / "o.jsonl"), *option]
    if command == "eval":
        argv += ["--solutions", "builtin"]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"kz {command}: error: {message}"
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "r.jsonl", "-k", "0"],
        ["compose", "--per-api", "0", "--out", "m.jsonl"],
        ["propose", "--min-apis", "0"],
        ["sft", "--data", "d.jsonl", "--model", "m", "--out", "o", "--lr", "0"],
        ["suite", "check", "builtin", "--max-memory", "-1"],
        ["serve", "--port", "70000"],
        ["train", "--config", "c.toml", "--dry-run", "--processes", "0"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_every_command_refuses_a_count_or_size_out_of_range(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("kz ") and ": error: argument " in last and "must be " in last
    assert not any(tmp_path.iterdir()), "nothing is written before the command line is accepted"


def test_eval_missing_problems_path(plugins, tmp_path, capsys):
    plugins("kz_triton")
    missing = tmp_path / "no" / "such" / "dir"
    assert main(["eval", "--problems", str(missing), "--solutions", "builtin", "--out", str(tmp_path / "r.jsonl")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert str(missing) in line


def test_eval_malformed_problem_file(plugins, tmp_path, capsys):
    plugins("kz_triton")
    bad = tmp_path / "level1" / "1_Bad.py"
    bad.parent.mkdir()
    bad.write_text("import torch\n\nclass Model(:\n    pass\n")
    assert main(["eval", "--problems", str(bad), "--solutions", str(tmp_path), "--out", str(tmp_path / "r.jsonl")]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"kz: error: {bad}: not valid Python (line 3")


def test_report_missing_results_file(tmp_path, capsys):
    missing = tmp_path / "nope.jsonl"
    assert main(["report", str(missing)]) == 1
    assert one_error_line(capsys.readouterr().err) == f"kz: error: {missing}: no such results file"
    empty = write_results(tmp_path / "empty.jsonl", [])
    assert main(["report", str(empty)]) == 1
    assert one_error_line(capsys.readouterr().err) == f"kz: error: {empty}: holds no results"
