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


# ----------------------------------------------------------------------------------------------------
# full-size outputs compared piece by piece (magnitude.pieces)
# ----------------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Pieces of 7 elements: every comparison below spans many pieces, and a difference sits in a late one."""
    from kzcore.evaluate import magnitude

    monkeypatch.setattr(magnitude, "PIECE_ELEMENTS", 7)


def _verdicts(pairs):
    from kzcore.builtins.outputs import compare

    out = []
    for e, a in pairs:
        check = compare([e], [a], EvalConfig())
        out.append((check.ok, check.message, check.max_abs_err, check.max_rel_err))
    return out


def _comparison_cases():
    g = torch.Generator().manual_seed(0)
    e = torch.randn(5, 13, generator=g)
    late = e.clone()
    late[4, 11] += 1.0  # one element out, in the last piece
    nan = e.clone()
    nan[3, 2] = float("nan")
    inf_e = e.clone()
    inf_e[4, 12] = float("inf")
    inf_match, inf_wrong = inf_e.clone(), inf_e.clone()
    inf_wrong[4, 12] = 1.0
    near = e + 1e-4 * torch.randn(5, 13, generator=g)
    cplx = torch.complex(e, e.flip(0))
    return [(e, near), (e, late), (e, nan), (inf_e, inf_match), (inf_e, inf_wrong), (e, e.t().contiguous().t()),
            (cplx, cplx + 1e-5), (cplx, cplx * 1.5)]  # fmt: skip


def test_output_checks_piece_by_piece_give_the_verdicts_of_one_piece(tiny_pieces, monkeypatch):
    from kzcore.evaluate import magnitude

    cases = _comparison_cases()
    pieced = _verdicts(cases)
    monkeypatch.setattr(magnitude, "PIECE_ELEMENTS", 1 << 24)
    whole = _verdicts(cases)
    assert pieced == whole
    assert [ok for ok, *_ in whole] == [True, False, False, True, False, True, True, False]
    assert "1 of 65 elements outside" in whole[1][1] and "1 NaN values" in whole[2][1]


def test_runs_differ_piece_by_piece_finds_a_difference_in_a_late_piece(tiny_pieces):
    a = torch.randn(10, 10)
    b = a.clone()
    assert runs_differ([a], [b]) == ""
    b[9, 9] += 1.0
    assert "1 of 100 elements differ" in runs_differ([a], [b])
    noisy = a * (1 + (torch.rand_like(a) - 0.5) * 4e-7)  # float-reordering noise in every piece
    assert runs_differ([a], [noisy]) == ""


def test_one_ulp_away_piece_by_piece_moves_each_nonzero_element_one_ulp(tiny_pieces):
    from kzcore.evaluate.degeneracy import one_ulp_away

    x = torch.randn(9, 11)
    x[0, :3] = 0
    y = one_ulp_away(x, seed=3)
    up, down = torch.nextafter(x, torch.tensor(float("inf"))), torch.nextafter(x, torch.tensor(float("-inf")))
    assert bool(((y == up) | (y == down))[x != 0].all()) and bool((y[x == 0] == 0).all())
    assert 20 < int((y == up)[x != 0].sum()) < 76  # both ways, at random
    assert torch.equal(y, one_ulp_away(x, seed=3)) and y.data_ptr() != x.data_ptr()


def test_a_check_that_fails_after_the_reference_ran_reaches_no_verdict(tmp_path, monkeypatch):
    """An error in the checks after the reference ran (on a GPU: out of memory in a comparison) leaves the
    problem neither passed nor flagged: its results still count, it is named as unchecked, and its report is
    not cached, so the next run checks it again."""
    from kzcore.evaluate.problem_check import checked_problems, degenerate_reason, unchecked_reason

    # the second run (the determinism check's, seeded 2 before forward) raises
    flaky = problem(
        "if torch.initial_seed() == 2:\n    raise RuntimeError('CUDA out of memory (a stand-in)')\nreturn torch.tanh(x)",
        name="flaky",
    )
    report, poisoned = check_problem_job(ProblemCheckJob(flaky, CPU), tmp_path, "cpu")
    assert poisoned  # out of memory: the worker is replaced, to start clean
    assert report.ok_runs and report.check_failed and not report.ok
    assert "check failed: RuntimeError: CUDA out of memory" in report.reason
    assert unchecked_reason(report) == report.reason and degenerate_reason(report) == ""

    class InProcess:
        def __init__(self):
            self.checked = []

        def map(self, jobs):
            for job in jobs:
                self.checked.append(job.problem.name)
                yield check_problem_job(job, tmp_path, "cpu")[0]

    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    good = problem("return torch.tanh(x)", name="good")
    pool = InProcess()
    first = checked_problems([flaky, good], CPU, pool, "cpu")
    assert first[flaky.key].check_failed and first[good.key].ok
    checked_problems([flaky, good], CPU, pool, "cpu")
    # out of memory beside another check: checked again alone (and failed again); the second call's lone check
    # of it is alone already, and the good one's verdict came from the cache
    assert pool.checked == ["flaky", "good", "flaky", "flaky"]


PEAK_SCRIPT = """
import resource, sys
from pathlib import Path
from kzcore.evaluate.problem_check import check_problem_job
from kzcore.types import EvalConfig, Problem, ProblemCheckJob

def instance_norm(n):
    source = (
        "import torch\\nclass Model(torch.nn.Module):\\n    def forward(self, x):\\n"
        "        return torch.nn.functional.instance_norm(x)\\n"
        f"def get_inputs():\\n    return [torch.randn(8, 16, {n})]\\ndef get_init_inputs():\\n    return []\\n"
    )
    return ProblemCheckJob(Problem(name="norm", level=1, source=source), EvalConfig(device="cpu"))

check_problem_job(instance_norm(64), Path(sys.argv[1]), "cpu")  # imports and plugins loaded before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report, _ = check_problem_job(instance_norm(1 << 17), Path(sys.argv[1]), "cpu")
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(report.ok, report.reason, (peak - before) * 1024 / (8 * 16 * (1 << 17) * 4))
"""


def test_a_full_size_check_needs_a_few_copies_of_the_output_not_a_dozen(tmp_path):
    """The check's peak memory over a problem whose input and output are 64 MiB each (in its own process, by
    the kernel's count of resident memory): the runs' inputs, clones and outputs, and comparisons made piece by
    piece. Made whole in float64, the determinism check alone took 12 copies of the output and ran a 7 GiB
    InstanceNorm out of an 80 GiB GPU, leaving the problem without a verdict."""
    import subprocess
    import sys

    script = tmp_path / "peak.py"
    script.write_text(PEAK_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ok, *_, ratio = done.stdout.split()
    assert ok == "True", done.stdout
    assert float(ratio) <= 7.0, done.stdout
