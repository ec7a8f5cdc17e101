"""The `kz` command as a first user meets it: config errors before any phase, Ctrl-C, usage errors, `kz report`,
help texts, suites and plugins, filtered warnings, trackers and the set-up, each run as `kz` in a subprocess
(exit code and the one line it prints) or, for the help texts and the trainer configs, through the library.
Other test modules reuse its `kz` helpers."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import typing
import warnings
from pathlib import Path

import attrs
import pytest

from kz_suites import BUILTIN_SUITE
from kzcore.cli import build_parser, quiet_known_warnings
from kzcore.jsonl import read_jsonl
from kzcore.report import verdict_counts
from kzcore.results import ResultsWriter
from kzcore.train.config import ConfigError, TrainConfig, check_device, load_config
from kzcore.types import EvalResult, Status

SUITE = BUILTIN_SUITE
KZ = Path(sys.executable).with_name("kz")
# How long a `kz` subprocess may take before a test calls it hung: generous, because a loaded or slow machine
# takes minutes to import torch and start workers. The Ctrl-C tests wait for events (a file, a line), never for
# time, and the slow work they interrupt takes SLOW_S > DEADLINE_S, so a command that waited for it would fail
# them, however fast or slow the machine.
DEADLINE_S = 600
SLOW_S = 3600


def kz_env(**env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("KZ_")}  # installed entry points load
    environ.update(COLUMNS="250", PYTHONIOENCODING="utf-8", HF_HUB_OFFLINE="1", KZ_TEST_PLUGINS="1")
    environ.update(env)
    return environ


def kz(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(KZ), *args], capture_output=True, text=True, env=kz_env(**env), timeout=DEADLINE_S)


def error_line(proc: subprocess.CompletedProcess, prefix: str = "kz: error: ") -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {proc.stderr!r}"
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def problem_dir(tmp_path: Path, names=("1_ReLU", "3_Sigmoid", "5_Softplus")) -> Path:
    level1 = tmp_path / "problems" / "level1"
    level1.mkdir(parents=True)
    for name in names:
        shutil.copy(SUITE / "level1" / f"{name}.py", level1)
    return level1.parent


# ----------------------------------------------------------------------------------------------------
# the trainer's config is checked before the first phase
# ----------------------------------------------------------------------------------------------------


def test_train_rejects_a_wrong_type_before_any_phase(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[sft]\nmax_steps = "ten"\n')
    proc = kz("train", "--config", str(config), "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 1
    assert error_line(proc).endswith("[sft] max_steps must be an integer, got 'ten'")
    assert not (tmp_path / "run").exists()  # nothing ran


WRONG = {bool: "yes", int: "ten", float: "fast", str: 5}


def scalar_keys():
    """(section, key, type) for every scalar key of every section, read from the classes, so a key another
    change adds is covered too."""
    for section in attrs.fields(TrainConfig):
        hints = typing.get_type_hints(type(section.default))
        for field in attrs.fields(type(section.default)):
            hint = hints[field.name]
            options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
            if len(options) == 1 and options[0] in WRONG:
                yield section.name, field.name, options[0]


def test_every_scalar_key_of_every_section_is_type_checked(tmp_path):
    keys = list(scalar_keys())
    assert len(keys) > 40 and ("sft", "use_cpu", bool) in keys and ("coder", "max_steps", int) in keys
    config = tmp_path / "c.toml"
    for section, key, kind in keys:
        config.write_text(f"[{section}]\n{key} = {json.dumps(WRONG[kind])}\n")
        with pytest.raises(ConfigError, match=rf"\[{section}\] {key} must be "):
            load_config(config)
    config.write_text('[heldout]\nk = [1, "2"]\n')
    with pytest.raises(ConfigError, match=r"\[heldout\] k must be a list of an integer"):
        load_config(config)
    config.write_text('[problems]\nheldout = "builtin:1"\n[sft]\nlearning_rate = 1\n')  # converter; int for float
    assert load_config(config).problems.heldout == ("builtin:1",)


def test_device_check_names_the_section_to_fix():
    config = attrs.evolve(TrainConfig(), sft=attrs.evolve(TrainConfig().sft, use_cpu=True))
    check_device(config, cuda_available=True)
    with pytest.raises(ConfigError, match=r"^\[coder\] use_cpu = false, .*set use_cpu = true in \[coder\]"):
        check_device(config, cuda_available=False)
    sections = [f.name for f in attrs.fields(TrainConfig) if hasattr(getattr(config, f.name), "use_cpu")]
    assert {"sft", "coder", "proposer_grpo"} <= set(sections)
    on_cpu = {name: attrs.evolve(getattr(config, name), use_cpu=True) for name in sections}
    check_device(attrs.evolve(config, **on_cpu), cuda_available=False)


def test_train_on_a_cpu_machine_with_use_cpu_false(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    config = tmp_path / "gpu.toml"
    config.write_text("[sft]\nuse_cpu = true\n[coder]\nuse_cpu = false\n[proposer_grpo]\nuse_cpu = true\n")
    proc = kz("train", "--config", str(config), "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 1
    assert "[coder] use_cpu = false" in error_line(proc) and "set use_cpu = true" in proc.stderr
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------------------
# Ctrl-C ends every command the same way: exit 130, one line, resumable
# ----------------------------------------------------------------------------------------------------


def sigint_default() -> None:
    """In the child: Ctrl-C's default action, whatever this suite inherited (a shell starts background jobs
    with SIGINT ignored, and an ignored SIGINT stays ignored in every process below, kz included)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when(args: list[str], ready, signum=signal.SIGINT, **env: str) -> subprocess.CompletedProcess:
    """Start `kz ARGS`, wait until ``ready()``, send SIGINT as a terminal's Ctrl-C would (or ``signum``: SIGTERM
    as a scheduler or ``timeout`` would), collect the exit. A command still running DEADLINE_S after the signal
    (it waited for the SLOW_S work it was interrupted in) fails the test."""
    proc = subprocess.Popen(
        [str(KZ), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kz_env(**env),
        preexec_fn=sigint_default,
    )  # fmt: skip
    deadline = time.monotonic() + DEADLINE_S
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "kz never got to the point to interrupt"
        time.sleep(0.05)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"kz still ran {DEADLINE_S} s after Ctrl-C: it waited for the work it was interrupted in\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def interrupted_line(proc: subprocess.CompletedProcess) -> str:
    """The one line saying the command was interrupted: the last on stderr, after at most a progress bar's
    final state; nothing else mentions the interruption (no traceback, no KeyboardInterrupt from a worker)."""
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert [line for line in lines if "interrupt" in line.lower()] == lines[-1:], proc.stderr
    assert lines[-1].startswith("kz: interrupted: "), lines[-1]
    return lines[-1]


def test_ctrl_c_ends_any_command_with_one_line(monkeypatch, capsys):
    """What `main` does for a command that saved nothing: one line that says so, exit 130."""
    from kzcore import cli
    from kzcore.cli import plugins as plugins_command

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(plugins_command, "_cmd_plugins", interrupted)
    assert cli.main(["plugins"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "kz: interrupted: nothing was saved\n" and captured.out == ""


def test_ctrl_c_while_sample_samples(tmp_path):
    out = tmp_path / "c.jsonl"
    args = ["sample", "--problems", str(problem_dir(tmp_path)), "--language", "python", "--batch-size", "1"]
    args += ["--out", str(out)]
    proc = interrupt_when([*args, "--policy", f"pylang-echo:{SLOW_S}"], lambda: len(read_jsonl(out)) >= 1)
    line = interrupted_line(proc)  # it did not wait for the slow second batch (interrupt_when)
    assert line == f"kz: interrupted: completions so far are in {out}; run the same command again to resume"
    assert len(read_jsonl(out)) == 1 and "completions for" not in proc.stdout
    resumed = kz(*args, "--policy", "pylang-echo")
    assert resumed.returncode == 0, resumed.stderr
    assert "3 completions for 3 problems" in resumed.stdout
    assert sorted(row["problem"] for row in read_jsonl(out)) == ["1_ReLU", "3_Sigmoid", "5_Softplus"]


def slow_problem(tmp_path: Path, mark: Path) -> Path:
    """A one-problem suite whose Model takes SLOW_S to build; it writes ``mark`` when it starts."""
    level1 = tmp_path / "slow" / "level1"
    level1.mkdir(parents=True)
    source = (SUITE / "level1" / "1_ReLU.py").read_text()
    slow_init = f"super().__init__()\n        Path({str(mark)!r}).write_text('building')\n        time.sleep({SLOW_S})"
    source = source.replace("super().__init__()", slow_init, 1)
    (level1 / "1_SlowReLU.py").write_text("import time\nfrom pathlib import Path\n" + source)
    return level1.parent


def test_ctrl_c_while_suite_check_runs_a_problem(tmp_path, own_workers):
    marks = tmp_path / "marks"  # the sandboxed worker may write here (KZ_SANDBOX_WRITABLE) and nowhere else
    marks.mkdir()
    suite = slow_problem(tmp_path, marks / "started")
    args = ["suite", "check", str(suite), "--device", "cpu", "--workers", "1", "--size", "small"]
    proc = interrupt_when(args, (marks / "started").exists, KZ_SANDBOX_WRITABLE=str(marks))
    line = interrupted_line(proc)  # it did not wait for the sleeping problem (interrupt_when)
    assert line == "kz: interrupted: nothing was saved (kz suite check prints its table once every problem is checked)"
    assert "problem checks" not in proc.stdout


def test_sigterm_while_suite_check_runs_keeps_the_reports_already_filed(tmp_path, own_workers):
    """SIGTERM (``timeout`` at its limit, a scheduler's pre-emption) unwinds like Ctrl-C: one line, exit 143,
    and the problems checked before it are in --out, each filed as its check ended."""
    marks = tmp_path / "marks"
    marks.mkdir()
    suite = slow_problem(tmp_path, marks / "started")
    (suite / "level1" / "1_ReLU.py").write_text((SUITE / "level1" / "1_ReLU.py").read_text())
    out = tmp_path / "checks.jsonl"
    args = ["suite", "check", str(suite), "--device", "cpu", "--workers", "2", "--size", "small", "--out", str(out)]
    proc = interrupt_when(
        args, lambda: (marks / "started").exists() and len(read_jsonl(out)) >= 1, signal.SIGTERM,
        KZ_SANDBOX_WRITABLE=str(marks),
    )  # fmt: skip
    assert proc.returncode == 143, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == f"kz: terminated: 1 of 2 problem reports so far are in {out}"
    (report,) = read_jsonl(out)  # the slow problem was still building its Model
    assert report["key"] == "level1/1_ReLU" and report["ok"] is True
    assert "problem checks" not in proc.stdout


def test_sigterm_ends_any_command_with_one_line(monkeypatch, capsys):
    from kzcore import cli
    from kzcore.cli import plugins as plugins_command

    def terminated(args):
        os.kill(os.getpid(), signal.SIGTERM)  # raised in this (the main) thread by kz's handler
        time.sleep(5)
        raise AssertionError("SIGTERM did not end the command")

    monkeypatch.setattr(plugins_command, "_cmd_plugins", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["plugins"]) == 143
    assert capsys.readouterr().err == "kz: terminated: nothing was saved\n"
    assert signal.getsignal(signal.SIGTERM) == before  # put back once the command ended


def test_ctrl_c_while_propose_waits_for_the_policy(tmp_path):
    pool = tmp_path / "pool.jsonl"
    args = ["propose", "--policy", f"pylang-echo:{SLOW_S}", "--n", "2", "--batch-size", "1", "--out", str(pool)]
    args += ["--device", "cpu", "--workers", "1"]
    proc = interrupt_when(args, lambda: len(read_jsonl(pool)) >= 1)  # the first batch is in the pool
    assert interrupted_line(proc) == f"kz: interrupted: modules so far are in {pool}"  # not after the slow batch
    (record,) = read_jsonl(pool)  # the echo policy writes no module: it fails the first gate, and is kept
    # (its progress line may or may not have reached stdout before the interrupt: the record is written first)
    assert record["gates"]["ast"]["ok"] is False
    assert "modules accepted" not in proc.stdout  # the summary of a finished run is not printed


def test_ctrl_c_while_distill_evaluates_the_teacher(tmp_path, own_workers):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / "1_ReLU.py").write_text(SLOW_CANDIDATE)
    out = tmp_path / "distill"
    args = ["distill", "--teacher", f"solutions:{solutions}", "--problems", str(problem_dir(tmp_path, ["1_ReLU"]))]
    args += ["--language", "python", "--out", str(out), "--workers", "1", "--device", "cpu"]
    args += ["--timeout", str(SLOW_S)]  # the candidate is not timed out first
    results = out / "results-python.jsonl"
    proc = interrupt_when(args, lambda: len(read_jsonl(results)) >= 1)  # the run header: workers are up
    line = interrupted_line(proc)  # it did not wait for the sleeping candidate (interrupt_when)
    assert (
        line
        == f"kz: interrupted: teacher samples and results so far are in {out}; run the same command again to resume"
    )
    assert [row["type"] for row in read_jsonl(results, on_skip=pytest.fail)] == ["run"]
    assert not (out / "sft.jsonl").exists()


def test_ctrl_c_while_eval_samples_from_a_policy(tmp_path, own_workers):
    completions, out = tmp_path / "c.jsonl", tmp_path / "r.jsonl"
    args = ["eval", "--problems", str(problem_dir(tmp_path)), "--language", "python", "--batch-size", "1"]
    args += ["--out", str(out), "--completions", str(completions), "--trials", "1", "--workers", "1"]
    # the first batch comes back at once, the next one takes SLOW_S: SIGINT lands mid-sampling
    proc = interrupt_when([*args, "--policy", f"pylang-echo:{SLOW_S}"], lambda: len(read_jsonl(completions)) >= 1)
    line = interrupted_line(proc)
    assert f"completions so far are in {completions}; run the same command again to resume" in line
    assert len(read_jsonl(completions)) == 1 and not out.exists()
    resumed = kz(*args, "--policy", "pylang-echo")
    assert resumed.returncode == 0, resumed.stderr
    assert "sampled 2 completions (" in resumed.stderr and "evaluated 3 candidates in" in resumed.stderr  # its cost
    names = [row["problem"] for row in read_jsonl(completions)]
    assert sorted(names) == ["1_ReLU", "3_Sigmoid", "5_Softplus"]  # none asked twice


SLOW_CANDIDATE = """import time
import torch
from torch import nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        time.sleep(3600)  # SLOW_S

    def forward(self, x):
        return torch.relu(x)
"""


def test_ctrl_c_while_eval_evaluates(tmp_path, own_workers):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / "1_ReLU.py").write_text(SLOW_CANDIDATE)
    out = tmp_path / "r.jsonl"
    args = ["eval", "--problems", str(problem_dir(tmp_path, ["1_ReLU"])), "--solutions", str(solutions)]
    args += ["--language", "python", "--out", str(out), "--workers", "1", "--timeout", str(SLOW_S)]
    proc = interrupt_when(args, lambda: len(read_jsonl(out)) >= 1)  # the run header: workers are up
    # it did not wait for the sleeping candidate (interrupt_when)
    assert f"results so far are in {out}; run the same command again to resume" in interrupted_line(proc)
    assert [row["type"] for row in read_jsonl(out, on_skip=pytest.fail)] == ["run"]


# ----------------------------------------------------------------------------------------------------
# kz eval never starts sampling by default
# ----------------------------------------------------------------------------------------------------


def test_eval_without_solutions_or_policy_is_a_usage_error(tmp_path):
    proc = kz("eval", "--problems", "builtin:1", "--out", str(tmp_path / "r.jsonl"))
    assert proc.returncode == 2
    assert "needs --solutions" in error_line(proc) and "--policy" in proc.stderr
    assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "r.completions.jsonl").exists()
    both = kz("eval", "--problems", "builtin:1", "--solutions", "builtin", "--policy", "smollm2")
    assert both.returncode == 2 and "not both" in error_line(both)


# ----------------------------------------------------------------------------------------------------
# kz report draws the verdicts on a CPU too; it warns about lines it skips
# ----------------------------------------------------------------------------------------------------


def write_results(path: Path, results: list[EvalResult], torn_tail: str = "") -> Path:
    writer = ResultsWriter(path)
    writer.write_header({"type": "run"})
    for r in results:
        writer.write(r)
    writer.close()
    with path.open("a") as f:
        f.write(torn_tail)
    return path


STATIC = "static check failed:\n- no `@triton.jit` kernel defined\n- torch compute in forward: torch.relu"


def test_report_on_cpu_results_draws_verdicts_and_shows_reasons(tmp_path):
    results = [
        EvalResult(problem=f"{i}_P", level=1 + i % 2, language="triton", sample=0, status=status, message=msg)
        for i, (status, msg) in enumerate(
            [(Status.CORRECT, "")] * 3 + [(Status.STATIC_CHECK_FAILED, STATIC)] * 24 + [(Status.TIMEOUT, "slow")]
        )
    ]
    path = write_results(tmp_path / "r.jsonl", results, torn_tail='{"type": "result", "probl')
    proc = kz("report", str(path))
    assert proc.returncode == 0, proc.stderr
    plots = tmp_path / "r.plots.png"
    assert plots.stat().st_size > 5000 and f"plots: {plots} (verdicts per level)" in proc.stdout
    assert "static check failed: no `@triton.jit` kernel defined; torch compute in forward: torch.relu" in proc.stdout
    assert "5 more not shown" in proc.stdout  # 25 failures, 20 rows
    assert (
        error_line(proc, "kz: warning: ")
        == f"kz: warning: {path}:30: torn last line skipped (25 characters, no newline)"
    )
    counts = verdict_counts(results)
    assert list(counts) == [1, 2] and counts[1][Status.CORRECT] == 2 and counts[2][Status.TIMEOUT] == 1
    assert sum(counts[1].values()) + sum(counts[2].values()) == len(results)


# ----------------------------------------------------------------------------------------------------
# help, suites, plugins
# ----------------------------------------------------------------------------------------------------


def parsers(parser: argparse.ArgumentParser, name: str = "kz"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_every_option_has_help_and_shows_its_default():
    seen = 0
    for name, parser in parsers(build_parser()):
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            seen += 1
            label = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help, f"{label} has no help text"
            if action.default is not None and action.nargs != 0 and action.default != []:  # flags are off
                assert f"(default: {action.default})" in text, f"{label}: default {action.default!r} not shown"
    assert seen > 90


def test_language_default_is_in_eval_help():
    proc = kz("eval", "--help")
    assert proc.returncode == 0
    assert "(default: triton)" in " ".join(proc.stdout.split())


def test_every_command_has_a_description():
    """Each `kz ... --help` opens with a paragraph saying what the command does, not only its usage line."""
    seen = []
    for name, parser in parsers(build_parser()):
        description = " ".join((parser.description or "").split())
        assert len(description) > 40, f"{name} has no description paragraph"
        assert description in " ".join(parser.format_help().split())
        seen.append(name)
    assert {"kz eval", "kz report", "kz suite show", "kz suite check", "kz pool stats", "kz train"} <= set(seen)
    for command in ("eval", "report"):
        proc = kz(command, "--help")
        assert proc.returncode == 0, proc.stderr
        usage, paragraph = proc.stdout.split("\n\n")[:2]
        assert usage.startswith(f"usage: kz {command} ") and not paragraph.lstrip().startswith("options:")
    assert "verdict breakdown per level" in " ".join(kz("report", "--help").stdout.split())


def test_report_summary_names_what_it_draws():
    summary = " ".join(kz("--help").stdout.split())
    line = summary[summary.index("report score table") :]
    assert line.startswith("report score table, verdicts per level and (when timed) speedup histogram")


def test_suite_show_of_a_missing_level(tmp_path):
    proc = kz("suite", "show", "builtin:9")
    assert proc.returncode == 1
    assert error_line(proc) == "kz: error: suite 'builtin' has no level 9; its levels: 1, 2"


def test_suite_show_lists_every_size_profile():
    proc = kz("suite", "show", "builtin:1")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[2].strip(): line.split("│")[3].strip() for line in proc.stdout.splitlines() if "│" in line}
    assert rows["19_Matmul"] == "full, small, alt"
    source = (SUITE / "level1" / "19_Matmul.py").read_text()
    assert '"alt"' in source


KERNELBENCH = Path(__file__).resolve().parent / "data" / "kernelbench"


def profile_rows(proc: subprocess.CompletedProcess) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr
    return {line.split("│")[2].strip(): line.split("│")[3].strip() for line in proc.stdout.splitlines() if "│" in line}


def test_suite_show_lists_derived_profiles_of_kernelbench_files():
    """KernelBench's files have no KZ_SIZES; the evaluator derives small and alt for them, and so says the table."""
    derived = "full, small (derived), alt (derived)"
    rows = profile_rows(kz("suite", "show", "kernelbench:1", "--kernelbench", str(KERNELBENCH)))
    assert rows == {"19_ReLU": derived, "23_Softmax": derived, "90_cumprod": derived}
    relu = KERNELBENCH / "KernelBench" / "level1" / "19_ReLU.py"
    assert "KZ_SIZES" not in relu.read_text()
    assert profile_rows(kz("suite", "show", str(relu))) == {"19_ReLU": derived}


def test_suite_show_marks_only_what_is_derived(tmp_path):
    """A problem with its own small profile gets only alt derived; one without size constants gets nothing."""
    own_small = (SUITE / "level1" / "1_ReLU.py").read_text().replace('    "alt": {"batch_size": 32, "dim": 336},\n', "")
    assert '"alt": {' not in own_small and '"small": {' in own_small
    (tmp_path / "1_OwnSmall.py").write_text(own_small)
    (tmp_path / "2_NoSizes.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x * 2\n\n\ndef get_inputs():\n    return [torch.rand(8, 8)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    rows = profile_rows(kz("suite", "show", str(tmp_path)))
    assert rows == {"1_OwnSmall": "full, small, alt (derived)", "2_NoSizes": "full"}


def test_the_test_language_is_not_in_a_normal_install():
    normal = kz("plugins", KZ_TEST_PLUGINS="")
    assert normal.returncode == 0, normal.stderr
    assert "pylang" not in normal.stdout and "language python" not in normal.stdout
    assert "language triton" in normal.stdout
    testing = kz("plugins")
    assert "pylang" in testing.stdout and "language python" in testing.stdout


# ----------------------------------------------------------------------------------------------------
# warnings our code triggers knowingly are filtered, narrowly
# ----------------------------------------------------------------------------------------------------


def test_known_warnings_are_filtered_and_others_still_show():
    def warn(message: str, module: str, category=FutureWarning):
        warnings.warn_explicit(message, category, "x.py", 1, module=module, registry={})

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_warnings()
        warn("`gradient_checkpointing` is deprecated and will be removed in v6.", "transformers.training_args")
        warn("`gradient_checkpointing` is deprecated and will be removed in v6.", "somewhere.else")
        warn("`other_arg` is deprecated and will be removed in v6.", "transformers.training_args")
        warn("`is_gradient_checkpointing` is deprecated and will be removed in v6.", "transformers.modeling_utils")
        warn("`gradient_checkpointing_enable` is deprecated and will be removed in v6.", "transformers.modeling_utils")
        warn("`other_method` is deprecated and will be removed in v6.", "transformers.modeling_utils")
    assert [str(w.message).split("`")[1] for w in caught] == ["gradient_checkpointing", "other_arg", "other_method"]


def test_device_check_with_until_looks_only_at_the_phases_that_run():
    """`--until 00-distill` on a CPU machine: distillation trains nothing, so a GPU-only [sft] is no error
    there; a run that reaches SFT still is."""
    config = TrainConfig()  # every use_cpu false
    check_device(config, cuda_available=False, roles={"distill"})
    with pytest.raises(ConfigError, match=r"^\[sft\] use_cpu = false"):
        check_device(config, cuda_available=False, roles={"distill", "sft"})


def test_train_until_on_a_cpu_machine_checks_the_phase_name_first(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[schedule]\nrounds = 1\n")
    proc = kz("train", "--config", str(config), "--run-dir", str(tmp_path / "run"), "--until", "05-coder")
    assert proc.returncode == 1
    assert "--until '05-coder': no such phase" in error_line(proc) and "01-coder" in proc.stderr
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------------------------------
# a configured report_to reaches TRL's configs; the default is no tracker
# ----------------------------------------------------------------------------------------------------


def test_report_to_reaches_the_grpo_config(tmp_path):
    pytest.importorskip("trl")
    from kzcore.train.coder import GRPOSettings, grpo_config

    config = tmp_path / "c.toml"
    config.write_text('[coder]\nuse_cpu = true\nreport_to = ["tensorboard"]\n')
    settings = load_config(config).coder
    assert settings.report_to == ("tensorboard",)
    with warnings.catch_warnings():
        quiet_known_warnings()
        assert grpo_config(settings, tmp_path / "out").report_to == ["tensorboard"]
        assert grpo_config(GRPOSettings(report_to=("tensorboard",), use_cpu=True), tmp_path).report_to == [
            "tensorboard"
        ]
        assert grpo_config(GRPOSettings(use_cpu=True), tmp_path).report_to == []  # "none": no tracker


class _Built(Exception):
    """Raised by the stand-in SFTTrainer once it has the arguments: nothing trains."""


def test_report_to_reaches_the_sft_config(tmp_path, monkeypatch):
    trl = pytest.importorskip("trl")
    from kzcore.cli import main
    from kzcore.train.sft import SFTSettings, run_sft

    built = []

    def trainer(*, model, args, train_dataset, callbacks=()):
        built.append(args)
        raise _Built

    monkeypatch.setattr(trl, "SFTTrainer", trainer)
    (tmp_path / "model").mkdir()
    data = tmp_path / "sft.jsonl"
    row = {"prompt": [{"role": "user", "content": "p"}], "completion": [{"role": "assistant", "content": "c"}]}
    data.write_text(json.dumps(row) + "\n")
    model, out = str(tmp_path / "model"), tmp_path / "out"
    cli = ["sft", "--model", model, "--data", str(data), "--out", str(out), "--cpu"]
    with warnings.catch_warnings():
        quiet_known_warnings()
        with pytest.raises(_Built):
            run_sft(model, data, out, SFTSettings(use_cpu=True, report_to=("tensorboard",)))
        with pytest.raises(_Built):
            run_sft(model, data, out, SFTSettings(use_cpu=True))
        with pytest.raises(_Built):
            main([*cli, "--report-to", "tensorboard", "--report-to", "wandb"])
        with pytest.raises(_Built):
            main(cli)
    assert [args.report_to for args in built] == [["tensorboard"], [], ["tensorboard", "wandb"], []]
    config = tmp_path / "c.toml"
    config.write_text('[sft]\nreport_to = ["tensorboard"]\n')
    assert load_config(config).sft.report_to == ("tensorboard",)


def test_setup_is_quiet():
    """The set-up's pip calls all go through one quiet PIP (-qq: no per-package index warnings;
    errors still show), so `make demo`'s log starts with what the demo does; after pip's own upgrade, through
    PIPR: the same PIP, retried whole (scripts/retry) and resuming a download cut off part-way."""
    import re

    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    pip = re.search(r"^PIP\s*:=\s*(.+)$", makefile, re.M)
    assert pip and "-m pip install" in pip.group(1) and "-qq" in pip.group(1).split()
    installs = [line for line in makefile.splitlines() if "pip install" in line and not line.startswith("PIP")]
    assert installs == [], f"pip called without $(PIP): {installs}"
    retried = re.search(r"^PIPR\s*:=\s*scripts/retry \d+ \$\(PIP\) (.+)$", makefile, re.M)
    assert retried and "--resume-retries" in retried.group(1)
    assert makefile.count("$(PIP) --upgrade pip") == 1 and makefile.count("$(PIPR)") >= 3  # torch, packages, model


def test_setup_installs_the_locked_versions(tmp_path):
    """A fresh clone installs the versions the tests ran with, not whatever is newest that day: every
    package install of the set-up is constrained by constraints.txt, which scripts/lock.py writes from the
    environment (`make lock`): exact versions, torch's without its build tag, no editable project package;
    pyproject.toml keeps ranges."""
    import re

    import torch

    root = Path(__file__).resolve().parent.parent
    makefile = (root / "Makefile").read_text()
    recipe = makefile[makefile.index("$(STAMP): $(LOCK)") :].split("\n\n")[0].splitlines()[1:]
    installs = [line for line in recipe if "$(PIP" in line and "--upgrade pip" not in line]
    assert len(installs) == 3, installs
    assert all(re.search(r"\$\(PIPR\) -c \$\((LOCK|VENV)\)", line) for line in installs), installs
    assert re.search(r"^lock: ", makefile, re.M) and "$(PY) scripts/lock.py $(LOCK)" in makefile

    def pins(path: Path) -> dict[str, str]:
        rows = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
        assert all(re.fullmatch(r'[A-Za-z0-9._-]+==[^ ;]+ ; python_version >= "3\.\d+"', r) for r in rows), rows
        return {r.split("==")[0].lower().replace("_", "-"): r.split("==")[1].split(" ;")[0] for r in rows}

    locked = pins(root / "constraints.txt")
    assert locked["torch"] == "2.13.0"
    assert {"trl", "transformers", "accelerate", "datasets", "triton", "pytest"} <= set(locked)
    assert not {"kzcore", "kz-triton", "kz-models", "kz-cuda", "kz-ray", "kz-suites", "kz-pylang"} & set(locked)
    pyproject = (root / "pyproject.toml").read_text()
    assert "==" not in pyproject[pyproject.index("dependencies = [") : pyproject.index("[project.scripts]")]
    proc = subprocess.run(
        [sys.executable, str(root / "scripts" / "lock.py"), str(tmp_path / "c.txt")],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert pins(tmp_path / "c.txt")["torch"] == torch.__version__.split("+")[0]  # the build tag dropped
