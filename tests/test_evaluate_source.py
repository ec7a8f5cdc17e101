"""kzcore.evaluate_source, the one-call API: a problem source and a candidate source in, an EvalResult out,
through the evaluator's own path (a real local worker; Triton under the CPU interpreter), and the one-line
ValueErrors for what no evaluation can start from."""

from __future__ import annotations

from pathlib import Path

import pytest

import kzcore
from kzcore.problems import load_problems, load_solutions
from kzcore.types import EvalConfig, Status

ADVERSARIAL = Path(__file__).resolve().parent / "adversarial"

# device="cpu" pins the Triton interpreter and the "small" size profile even on a machine with a GPU.
CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=60)


@pytest.fixture
def relu(plugins):
    """(plugin manager with kz_triton, the built-in 1_ReLU problem's source, its built-in Triton solution)."""
    pm = plugins("kz_triton")
    (problem,) = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    (solution,) = load_solutions("builtin", [problem], "triton", pm=pm)
    return pm, problem.source, solution.source


def test_the_builtin_relu_solution_is_correct(relu):
    pm, problem, solution = relu
    result = kzcore.evaluate_source(problem, solution, "triton", CONFIG, pm=pm)
    assert result.status is Status.CORRECT, result.message
    assert result.problem == "problem" and result.language == "triton"
    assert result.device == "cpu" and result.trials == CONFIG.trials  # the config given was the one used
    assert result.launches >= CONFIG.trials  # the candidate's own kernel ran in each trial


def test_a_kernel_writing_zeros_is_incorrect(relu):
    _, problem, _ = relu
    zeros = (ADVERSARIAL / "zeros_output.py").read_text()
    result = kzcore.evaluate_source(problem, zeros, "triton", CONFIG)  # the process-wide plugin manager
    assert result.status is Status.INCORRECT, result.message
    assert "outside atol" in result.message


def test_an_unknown_language_is_a_value_error_naming_the_installed_ones(relu):
    pm, problem, solution = relu
    with pytest.raises(ValueError, match=r"^no plugin handles language 'fortran'; installed languages: .*triton"):
        kzcore.evaluate_source(problem, solution, "fortran", CONFIG, pm=pm)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("def get_inputs(", "def get_inputs_gone(", r"^problem source: not a KernelBench problem, missing get_inputs$"),
        ("class Model(", "class Gone(", r"^problem source: not a KernelBench problem, missing Model$"),
        ("import torch\n", "import torch +\n", r"^problem source: not valid Python \(line \d+: .+\)$"),
    ],
)
def test_a_problem_source_that_is_no_kernelbench_problem_is_a_value_error(relu, old, new, message):
    pm, problem, solution = relu
    broken = problem.replace(old, new)
    assert broken != problem
    with pytest.raises(ValueError, match=message):
        kzcore.evaluate_source(broken, solution, "triton", CONFIG, pm=pm)
