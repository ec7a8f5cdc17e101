"""Problem modules checked in evaluator workers: each kind of broken or degenerate problem gets the right
verdict and reason, good ones pass, and `kz suite check` reports them."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from kzcore.cli import main
from kzcore.evaluate.problem_check import check_problems
from kzcore.problems import load_problems
from kzcore.types import EvalConfig, Problem

HEADER = "import torch\nfrom torch import nn\n\n"
TAIL = "\ndef get_inputs():\n    return [torch.randn(8, 16)]\n\n\ndef get_init_inputs():\n    return []\n"


def module(forward: str, extra_init: str = "", tail: str = TAIL) -> str:
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    return (
        HEADER
        + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        + (textwrap.indent(extra_init, " " * 8) + "\n" if extra_init else "")
        + "\n    def forward(self, x):\n"
        + body
        + "\n\n"
        + tail
    )


CASES = {
    "good": (module("return torch.tanh(x) * 3"), None),
    "zeros": (module("return x * 0"), "~0"),
    # every element within atol, so zeros pass elementwise, but not the relative-error check candidates face
    "small": (module("return x * 2e-3"), None),
    "constant": (module("return x * 1e-4 + 5.0"), "constant"),
    "input_independent": (
        module("return self.w * 1.0", extra_init="self.w = nn.Parameter(torch.randn(8, 16))"),
        "barely depends",
    ),
    "dropout": (module("return nn.functional.dropout(x, 0.5, training=True)"), "not deterministic"),
    "nan": (module("return torch.log(x)"), "NaN or Inf"),
    "crash": (module("raise RuntimeError('boom')"), "does not run: RuntimeError: boom"),
    "not_tensor": (module("return 3"), "outputs must be tensors"),
    # a reference that rebinds its own attribute while it runs: every candidate on it would be hack_suspected
    "self_changing": (
        module("self.calls = self.calls + 1\nreturn torch.tanh(x)", extra_init="self.calls = 0"),
        "the reference changes itself while it runs (`reference.calls`)",
    ),
    "import_error": (
        "import torch\nimport no_such_module_kz\n" + module("return x"),
        "does not run: ModuleNotFoundError",
    ),
}


@pytest.fixture(scope="module")
def reports(own_workers, timeout_wait):
    problems = [Problem(name=name, source=src, level=1) for name, (src, _) in CASES.items()]
    problems.append(Problem(name="hang", source=module("while True:\n    pass"), level=1))
    return {r.problem: r for r in check_problems(problems, EvalConfig(timeout_s=10), workers=2)}


@pytest.mark.parametrize("name", list(CASES))
def test_problem_verdicts(reports, name):
    report = reports[name]
    expected = CASES[name][1]
    if expected is None:
        assert report.ok, report.reason
        assert report.stats["output mean_abs"] > 1e-3
    else:
        assert not report.ok
        assert expected in report.reason, report.reason


def test_runs_deterministic_finite_flags_are_staged(reports):
    assert not reports["crash"].ok_runs
    # it runs, so kz eval flags it and leaves its candidates' results out of the scores
    assert reports["self_changing"].ok_runs and not reports["self_changing"].deterministic
    assert reports["dropout"].ok_runs and not reports["dropout"].deterministic
    assert reports["nan"].deterministic and not reports["nan"].finite
    assert reports["zeros"].finite and reports["zeros"].degenerate


def test_a_hanging_problem_times_out_without_stopping_the_others(reports):
    assert not reports["hang"].ok
    assert "timeout" in reports["hang"].reason
    assert reports["good"].ok


def test_builtin_suite_passes_every_check(own_workers):
    reports = check_problems(load_problems("builtin:2"), EvalConfig(), workers=2)
    assert len(reports) >= 12
    assert all(r.ok for r in reports), [(r.key, r.reason) for r in reports if not r.ok]


def test_kz_suite_check_reports_failures(tmp_path, capsys, own_workers):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_Good.py").write_text(CASES["good"][0])
    (tmp_path / "level1" / "2_Zero.py").write_text(CASES["zeros"][0])
    report = tmp_path / "out" / "check.jsonl"
    assert main(["suite", "check", str(tmp_path), "--workers", "1", "--out", str(report)]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 problems pass every check" in out
    # the wall time, and the part of it spent inside the checks (the rest: worker start-up and dispatch)
    wall, inside = map(float, re.search(r"checked in ([\d.]+) s \(([\d.]+) s inside", out).groups())
    assert 0 <= inside <= wall and wall > 0
    assert "level1/2_Zero" in out and "~0" in out
    rows = {row["key"]: row for row in map(json.loads, report.read_text().splitlines())}
    assert rows["level1/1_Good"]["ok"] is True
    assert rows["level1/2_Zero"]["ok"] is False and rows["level1/2_Zero"]["degenerate"] is True
    # --only: a few problems of the suite (by name or key), e.g. re-checked alone after running out of memory
    assert (
        main(["suite", "check", str(tmp_path), "--workers", "1", "--only", "level1/2_Zero", "--out", str(report)]) == 0
    )
    assert [json.loads(x)["key"] for x in report.read_text().splitlines()] == ["level1/2_Zero"]
    assert "0 of 1 problems pass every check" in capsys.readouterr().out


def test_kz_suite_check_only_names_a_problem_the_suite_lacks(tmp_path, capsys):
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "1_Good.py").write_text(CASES["good"][0])
    assert main(["suite", "check", str(tmp_path), "--only", "1_Good,9_Missing"]) == 1
    assert "--only: no problem '9_Missing'" in capsys.readouterr().err


def test_memory_budget(tmp_path):
    from kzcore.evaluate.problem_check import check_problem_job
    from kzcore.types import ProblemCheckJob

    problem = Problem(name="good", source=CASES["good"][0], level=1)
    ok, _ = check_problem_job(ProblemCheckJob(problem, EvalConfig(device="cpu")), tmp_path, "cpu")
    assert ok.ok
    tight, _ = check_problem_job(ProblemCheckJob(problem, EvalConfig(device="cpu"), max_bytes=512), tmp_path, "cpu")
    assert not tight.ok and "memory budget" in tight.reason  # 8x16 fp32 input + output = 1024 bytes


class SharedDevice:
    """A pool whose jobs share one device: the problems named in ``failing`` get that reason when they run beside
    others (or, with ``alone_too``, always); every other check passes. ``batches`` records each map's jobs."""

    def __init__(self, failing: dict[str, str], alone_too: bool = False):
        self.failing, self.alone_too, self.batches = failing, alone_too, []

    def map(self, jobs):
        from kzcore.evaluate.problem_check import failed_report
        from kzcore.types import ProblemReport

        self.batches.append([j.problem.name for j in jobs])
        for job in jobs:
            reason = self.failing.get(job.problem.name)
            if reason and (len(jobs) > 1 or self.alone_too):
                yield failed_report(job, reason)
            else:
                yield ProblemReport(problem=job.problem.name, level=1, ok_runs=True, deterministic=True,
                                    finite=True, degenerate=False)  # fmt: skip


OOM = "check failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 8 GiB"


def test_a_check_that_ran_out_of_memory_beside_others_is_checked_again_alone():
    """Checks share the device; one that ran out of memory while others ran is checked again on its own (a
    map of one job), and the report kept is the lone run's."""
    problems = [Problem(name=n, source=CASES["good"][0], level=1) for n in ("small", "big", "other")]
    pool = SharedDevice({"big": OOM})
    reports = check_problems(problems, EvalConfig(device="cpu"), pool=pool)
    assert [r.problem for r in reports] == ["small", "big", "other"]
    assert all(r.ok for r in reports), [r.reason for r in reports]
    assert pool.batches == [["small", "big", "other"], ["big"]]


def test_kz_eval_checks_again_alone_what_its_neighbours_crowded_out(tmp_path, monkeypatch):
    """`checked_problems` (kz eval, the trainer's held-out) takes its budget from the memory free at the time, so
    a check that ran out of memory, or whose reference was over that budget, while other checks shared the
    device is checked again alone; the lone run's report is the one kept (and cached)."""
    from kzcore.evaluate.problem_check import checked_problems

    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    problems = [Problem(name=n, source=CASES["good"][0] + f"# {n}\n", level=1) for n in ("small", "oom", "wide")]
    pool = SharedDevice({"oom": OOM, "wide": "needs 16.03 GiB, over the 9.50 GiB memory budget"})
    reports = checked_problems(problems, EvalConfig(device="cpu"), pool, "cpu")
    assert pool.batches == [["small", "oom", "wide"], ["oom"], ["wide"]]
    assert all(reports[p.key].ok for p in problems), [r.reason for r in reports.values()]
    checked_problems(problems, EvalConfig(device="cpu"), pool, "cpu")
    assert len(pool.batches) == 3  # every verdict, the lone runs' included, came from the cache


def test_a_reference_over_a_fixed_budget_is_not_checked_again():
    """The Proposer's gate gives each module a fixed budget: over it is the module's own verdict, whoever shared
    the device."""
    over = "needs 20.00 GiB, over the 16.00 GiB memory budget"
    problems = [Problem(name=n, source=CASES["good"][0], level=1) for n in ("a", "b")]
    pool = SharedDevice({"a": over, "b": over}, alone_too=True)
    reports = check_problems(problems, EvalConfig(device="cpu"), pool=pool)
    assert pool.batches == [["a", "b"]] and all("memory budget" in r.reason for r in reports)
