"""The degeneracy rule asks the output check candidates face (``kz_check_outputs``, then the core's relative-error
check): a problem is degenerate only when a trivial output (zeros, a constant equal to its mean, its value for
other inputs) passes that check. Outputs small everywhere but computed (a wide softmax, a long row mean) are
not degenerate; outputs that are ~0, ~constant or input-independent still are, and so are outputs of float
rounding noise, on which no honest kernel could pass. In-process, no workers."""

from __future__ import annotations

import textwrap

import pytest
import torch

from kz_suites import KERNELBENCH_COPY
from kzcore import hookimpl
from kzcore.builtins.outputs import compare
from kzcore.evaluate import sizes
from kzcore.evaluate.checking import check_outputs
from kzcore.evaluate.problem_check import check_problem_job
from kzcore.problems import import_module_from_file
from kzcore.types import EvalConfig, OutputCheck, Problem, ProblemCheckJob

KERNELBENCH = KERNELBENCH_COPY
KB_SOFTMAX = KERNELBENCH / "level1/23_Softmax.py"


def source(forward: str, inputs: str, init: str = "") -> str:
    return (
        "import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n"
        + (textwrap.indent(init, " " * 8) + "\n" if init else "")
        + "\n    def forward(self, x):\n"
        + textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
        + f"\n\n\ndef get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n"
    )


def check(tmp_path, text: str, config: EvalConfig, pm=None):
    report, poisoned = check_problem_job(
        ProblemCheckJob(Problem(name="p", source=text, level=1), config), tmp_path, "cpu", pm
    )
    assert not poisoned
    return report


def reference_output(tmp_path, text: str, config: EvalConfig):
    """The problem's output at the size the check runs it (seeded like its first run)."""
    path = tmp_path / "kz_reference_probe.py"
    path.write_text(text)
    module = import_module_from_file(path, path.stem)
    sizes.apply_profile(module, config.size)
    torch.manual_seed(config.seed)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(config.seed + 1)
    with torch.no_grad():
        return model(*module.get_inputs())


# Small everywhere, yet real work: zeros pass the elementwise tolerance (every element is far below atol),
# and the relative-error check every candidate meets refuses them. KernelBench's 23_Softmax at the derived
# small size a CPU run uses, and at its full 393,216-wide rows (two of them: the property is per row).
SMALL_BUT_COMPUTED = {
    "softmax_4096_wide": (source("return torch.softmax(x, dim=1)", "torch.randn(8, 4096)"), "full"),
    "row_mean_65536_wide": (source("return x.mean(dim=1)", "torch.randn(8, 65536)"), "full"),
    "kernelbench_23_softmax_small": (KB_SOFTMAX.read_text(), "small"),
    "kernelbench_23_softmax_full_width": (
        KB_SOFTMAX.read_text().replace("batch_size = 4096", "batch_size = 2"),
        "full",
    ),
}


@pytest.mark.parametrize("name", SMALL_BUT_COMPUTED)
def test_an_output_small_everywhere_is_not_degenerate_when_the_candidates_check_refuses_zeros(
    tmp_path, isolated_plugins, name
):
    text, size = SMALL_BUT_COMPUTED[name]
    config = EvalConfig(device="cpu", size=size)
    expected = [reference_output(tmp_path, text, config)]
    zeros = [torch.zeros_like(expected[0])]
    assert compare(expected, zeros, config).ok  # the property behind the old flag holds at this size
    assert not check_outputs(isolated_plugins, expected, zeros, config).ok  # a zeros kernel is refused
    report = check(tmp_path, text, config)
    assert report.finite and not report.degenerate and report.ok, report.reason
    assert report.size.startswith(size)


DEGENERATE = {
    # KernelBench level2/80's shape: max over a dim with keepdim, minus the mean over that size-1 dim: exactly 0
    "zero_for_any_input": (
        source("y = x.max(dim=1, keepdim=True).values\nreturn y - y.mean(dim=1, keepdim=True)", "torch.randn(16, 64)"),
        "is ~0: an all-zeros output passes",
    ),
    "near_constant": (source("return x * 1e-4 + 5.0", "torch.randn(16, 64)"), "is ~constant"),
    "input_independent": (
        source("return self.w * 1.0", "torch.randn(8, 16)", init="self.w = nn.Parameter(torch.randn(8, 16))"),
        "barely depends on the inputs",
    ),
    # tiny, so zeros pass elementwise, and not input-dependent: only the other-inputs stand-in passes in norm
    "tiny_and_input_independent": (
        source("return self.w * 1e-6 + 0 * x", "torch.randn(8, 16)", init="self.w = nn.Parameter(torch.randn(8, 16))"),
        "barely depends on the inputs",
    ),
    "loss_averaged_over_a_large_batch": (source("return (x ** 2).mean()", "torch.randn(4096, 64)"), "barely depends"),
}


@pytest.mark.parametrize("name", DEGENERATE)
def test_a_problem_a_trivial_output_passes_is_still_degenerate(tmp_path, name):
    text, reason = DEGENERATE[name]
    report = check(tmp_path, text, EvalConfig(device="cpu"))
    assert report.ok_runs and report.finite and report.degenerate and not report.ok
    assert reason in report.reason, report.reason


# The mean of a GroupNorm output is 0 but for rounding (~1e-8): zeros fail the norm check there, and so would
# every honest kernel, which rounds differently; inputs one ulp away move the output by most of its norm
ROUNDING_NOISE = {
    "groupnorm_mean": source(
        "return self.norm(x).mean(dim=(1, 2, 3))", "torch.randn(4, 16, 8, 8)", init="self.norm = nn.GroupNorm(4, 16)"
    ),
    "kernelbench_l2_23": (KERNELBENCH / "level2/23_Conv3d_GroupNorm_Mean.py").read_text(),
}


@pytest.mark.parametrize("name", ROUNDING_NOISE)
def test_an_output_of_float_rounding_noise_no_kernel_could_match_is_flagged(tmp_path, name):
    report = check(tmp_path, ROUNDING_NOISE[name], EvalConfig(device="cpu"))
    assert report.ok_runs and report.deterministic and report.degenerate, report.reason
    assert "is float rounding noise" in report.reason and "~0" not in report.reason, report.reason
    assert report.stats["output one_ulp_rel_err"] > 0.1


def test_the_rule_asks_the_plugins_output_check(tmp_path, isolated_plugins):
    """The trivial outputs are judged by ``kz_check_outputs`` as a candidate's are: a plugin whose check refuses
    everything leaves nothing trivial passing, so even an all-zero problem is not flagged under it."""

    class RefuseAll:
        @hookimpl(tryfirst=True)
        def kz_check_outputs(self, expected, actual, config):
            return OutputCheck(False, "refused")

    text = DEGENERATE["zero_for_any_input"][0]
    assert check(tmp_path, text, EvalConfig(device="cpu")).degenerate
    isolated_plugins.register(RefuseAll(), name="refuse-all")
    try:
        report = check(tmp_path, text, EvalConfig(device="cpu"), pm=isolated_plugins)
    finally:
        isolated_plugins.unregister(name="refuse-all")
    assert report.ok and not report.degenerate, report.reason
