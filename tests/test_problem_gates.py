"""The problem check's determinism gate and memory budget on their own (in-process, no workers: the gates
are pure functions of one problem): float-reordering noise between two runs passes, real randomness fails;
the budget comes from the device unless one is given, and the Proposer's stays fixed."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kzcore.evaluate.magnitude import check_relative_error
from kzcore.evaluate.problem_check import (
    DEVICE_BUDGET,
    PROPOSER_BUDGET,
    check_problem_job,
    check_problems,
    free_bytes,
    runs_differ,
)
from kzcore.types import EvalConfig, OutputCheck, Problem, ProblemCheckJob

CPU = EvalConfig(device="cpu")


def problem(forward: str, name: str = "p") -> Problem:
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    source = (
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        f"{body}\n\n\ndef get_inputs():\n    return [torch.randn(64, 256)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    return Problem(name=name, source=source, level=1)


def check(tmp_path, p: Problem, max_bytes: int = DEVICE_BUDGET):
    report, poisoned = check_problem_job(ProblemCheckJob(p, CPU, max_bytes=max_bytes), tmp_path, "cpu")
    assert not poisoned
    return report


@pytest.mark.parametrize(
    "forward",
    [
        # a few ulps of noise, as cuDNN's nondeterministic ConvTranspose algorithms give run to run
        "y = torch.tanh(x) * 3\nreturn y * (1 + (torch.rand_like(y) - 0.5) * 4e-7)",
        # summation order differing between runs
        "perm = torch.randperm(x.shape[1])\nreturn x[:, perm].sum(dim=1, keepdim=True) + x",
    ],
    ids=["ulp_noise", "reordered_sum"],
)
def test_float_reordering_noise_counts_as_deterministic(tmp_path, forward):
    report = check(tmp_path, problem(forward))
    assert report.deterministic, report.reason
    assert report.ok, report.reason


@pytest.mark.parametrize(
    "forward",
    [
        "return nn.functional.dropout(x, 0.2, training=True)",
        "return x + torch.rand_like(x) * 1e-2",
        "y = x.clone()\ny[torch.randint(0, 64, (1,)), 0] += 1.0\nreturn y",  # one element, at random
    ],
    ids=["dropout", "rand_noise", "one_random_element"],
)
def test_real_randomness_is_not_deterministic(tmp_path, forward):
    report = check(tmp_path, problem(forward))
    assert report.ok_runs and not report.deterministic
    assert "not deterministic" in report.reason


def test_runs_differ_on_half_precision_uses_its_own_ulps():
    a = torch.randn(1000, dtype=torch.bfloat16)
    one_ulp = a + a * torch.finfo(torch.bfloat16).eps * (torch.rand(1000) < 0.1)
    assert runs_differ([a], [one_ulp]) == ""
    assert runs_differ([a], [a * 1.1]) != ""


def test_memory_budget_comes_from_the_device_unless_given(tmp_path):
    p = problem("return torch.tanh(x)")
    assert free_bytes("cpu") > 2**20
    assert check(tmp_path, p).ok  # DEVICE_BUDGET: 0.8 x available RAM
    tight = check(tmp_path, p, max_bytes=64 * 256 * 4)  # input alone fills it: input + output do not fit
    assert not tight.ok and "memory budget" in tight.reason


def test_the_proposer_keeps_its_fixed_budget(monkeypatch):
    seen = []

    class Pool:
        def map(self, jobs):
            seen.extend(jobs)
            return []

    check_problems([problem("return x")], CPU, pool=Pool())  # how the Proposer calls it
    assert [j.max_bytes for j in seen] == [PROPOSER_BUDGET] == [16 * 2**30]


def test_relative_error_fails_an_output_that_is_small_everywhere():
    expected = [torch.softmax(torch.rand(8, 4096), dim=1)]  # every element ~2.4e-4, far below atol
    passed = OutputCheck(True)
    zeros = check_relative_error(expected, [torch.zeros_like(expected[0])], CPU, passed)
    assert not zeros.ok and "norm" in zeros.message
    noisy = expected[0] * (1 + 1e-4 * torch.randn_like(expected[0]))
    assert check_relative_error(expected, [noisy], CPU, passed).ok
    exact_zero = [torch.zeros(4, 4)]  # a reference of exact zeros: nothing to scale by, allclose decides
    assert check_relative_error(exact_zero, [torch.zeros(4, 4)], CPU, passed).ok


def test_relative_errors_in_fp32_match_fp64_and_leave_out_what_the_reference_does_not_define():
    from kzcore.evaluate.magnitude import relative_errors

    torch.manual_seed(0)
    e = torch.randn(1 << 20)
    a = e * (1 + 3e-3 * torch.randn_like(e))
    exact = float((a.double() - e.double()).norm() / e.double().norm())
    (err,) = relative_errors([e], [a])
    assert err == pytest.approx(exact, rel=1e-4)
    (err16,) = relative_errors([e.half()], [a.half()])  # lower precisions are widened to fp32
    assert err16 == pytest.approx(exact, rel=0.2)
    e_inf, a_inf = e.clone(), a.clone()
    e_inf[:10], a_inf[:10] = float("inf"), 0.0  # not finite in the reference: left out of both norms
    assert relative_errors([e_inf], [a_inf])[0] == pytest.approx(
        float((a[10:].double() - e[10:].double()).norm() / e[10:].double().norm()), rel=1e-4
    )
    a_nan = a.clone()
    a_nan[5] = float("nan")  # NaN where the reference has a number: the error is NaN, which fails any bound
    assert relative_errors([e], [a_nan])[0] != relative_errors([e], [a_nan])[0]
    (err64,) = relative_errors([e.double()], [a.double()])
    assert err64 == pytest.approx(exact, rel=1e-12)
    for scale in (1e-30, 1e30):  # squares out of fp32's range: computed again in fp64, the same answer
        assert relative_errors([e * scale], [a * scale])[0] == pytest.approx(exact, rel=1e-4)


def test_rel_l2_sums_every_floating_output_and_leaves_out_what_the_reference_does_not_define():
    from kzcore.evaluate.precision import rel_l2

    torch.manual_seed(0)
    e1, e2 = torch.randn(1000), torch.randn(10, 10)
    a1, a2 = e1 + 1e-3 * torch.randn(1000), e2.clone()
    exact = float(((a1.double() - e1.double()) ** 2).sum() / ((e1.double() ** 2).sum() + (e2.double() ** 2).sum()))
    assert rel_l2([a1, a2, torch.arange(3)], [e1, e2, torch.arange(3)]) == pytest.approx(exact**0.5, rel=1e-4)
    e1[0], a1[0] = float("nan"), 123.0  # a NaN in the reference: that element is left out
    assert rel_l2([a1[1:]], [e1[1:]]) == pytest.approx(rel_l2([a1], [e1]), rel=1e-6)
    assert rel_l2([torch.zeros(4)], [torch.zeros(4)]) == 0.0


def test_kz_report_leaves_degenerate_problems_out_and_says_so(tmp_path, capsys):
    from kzcore.cli import main
    from kzcore.results import ResultsWriter
    from kzcore.types import EvalResult, Status

    out = tmp_path / "r.jsonl"
    writer = ResultsWriter(out)
    writer.write(EvalResult(problem="1_Good", level=1, language="triton", sample=0, status=Status.INCORRECT))
    writer.write(
        EvalResult(
            problem="23_Softmax", level=1, language="triton", sample=0, status=Status.CORRECT,
            problem_degenerate="output: an all-zeros output is within tolerance",
        )
    )  # fmt: skip
    writer.close()
    assert main(["report", str(out), "--plot", str(tmp_path / "p.png")]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "1 problem(s) failed the problem check" in text and "level1/23_Softmax" in text
    assert "│ all │ 1 │ 1 │ 0 │ 0.0% │" in text  # one problem, its one sample, nothing correct
    assert main(["report", str(out), "--plot", str(tmp_path / "p.png"), "--include-degenerate"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "are counted (--include-degenerate)" in text and "│ all │ 2 │ 2 │ 1 │ 50.0% │" in text


@pytest.mark.gpu
def test_conv_transpose_on_cudnn_counts_as_deterministic_and_budget_comes_from_the_gpu(tmp_path):
    """KernelBench's ConvTranspose problems differ run to run by cuDNN's nondeterministic algorithms (ulps):
    the gate must pass them; the budget is a fraction of the GPU's free memory."""
    source = (
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.conv = nn.ConvTranspose3d(32, 64, 3, stride=2)\n\n"
        "    def forward(self, x):\n        return self.conv(x)\n\n\n"
        "def get_inputs():\n    return [torch.rand(16, 32, 16, 32, 32)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    job = ProblemCheckJob(
        Problem(name="ct", source=source, level=2), EvalConfig(device="cuda", size="full"), DEVICE_BUDGET
    )
    report, poisoned = check_problem_job(job, tmp_path, "cuda")
    assert not poisoned and report.deterministic and report.ok, report.reason
    assert free_bytes("cuda") > 2**30
