"""The built-in suite: size, a small profile and a Triton solution per problem, and problems whose outputs
cannot be matched by a kernel that writes zeros, a constant, or ignores its inputs. Problems are trusted
reference code, so they are imported in-process at the small size (fast, no workers)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from kz_suites import BUILTIN_SUITE
from kzcore.builtins.outputs import compare
from kzcore.evaluate.pipeline import as_list
from kzcore.problems import apply_size_profile, import_module_from_file, load_problems
from kzcore.types import EvalConfig

SUITE = BUILTIN_SUITE
PROBLEMS = load_problems("builtin")
CONFIG = EvalConfig()
_ids = itertools.count()


def run_problem(problem, seed: int) -> list[torch.Tensor]:
    """The reference output at the small size, constructed as the evaluator does (seed 0) on inputs drawn
    with ``seed``."""
    module = import_module_from_file(Path(problem.path), f"kz_test_suite_{next(_ids)}")
    assert apply_size_profile(module, "small") == "small"
    with torch.device("cpu"):
        torch.manual_seed(0)
        init = list(module.get_init_inputs())
        torch.manual_seed(0)
        model = module.Model(*init)
        torch.manual_seed(seed)
        inputs = list(module.get_inputs())
        with torch.no_grad():
            return as_list(model(*inputs))


def test_suite_size():
    levels = [p.level for p in PROBLEMS]
    assert levels.count(1) >= 24
    assert levels.count(2) >= 12
    assert set(levels) == {1, 2}


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key)
def test_problem_has_small_profile_and_solution(problem):
    module = import_module_from_file(Path(problem.path), f"kz_test_suite_{next(_ids)}")
    small = getattr(module, "KZ_SIZES", {}).get("small")
    assert small, f"{problem.key} has no KZ_SIZES['small']"
    assert all(hasattr(module, name) for name in small)
    assert (SUITE / "solutions" / "triton" / f"level{problem.level}" / f"{problem.name}.py").is_file()


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key)
def test_problem_is_not_degenerate(problem):
    outputs = run_problem(problem, seed=1)
    other = run_problem(problem, seed=2)
    assert outputs, f"{problem.key} returns no tensors"
    for i, (y, y2) in enumerate(zip(outputs, other)):
        where = f"{problem.key} output {i}"
        assert isinstance(y, torch.Tensor) and y.numel() > 0, where
        y64 = y.double()
        assert torch.isfinite(y64).all(), f"{where} is not finite"
        assert y64.abs().mean() > 1e-3, f"{where} is ~0 (mean |y| = {float(y64.abs().mean()):.2e})"
        assert not compare([y], [torch.zeros_like(y)], CONFIG).ok, f"{where}: all zeros passes the tolerance check"
        mean = y64.mean()
        constant = torch.full_like(y, float(mean) if y.is_floating_point() else int(mean.round()))
        assert not compare([y], [constant], CONFIG).ok, f"{where}: a constant (its mean) passes the tolerance check"
        assert not compare([y], [y2], CONFIG).ok, f"{where}: outputs for two input seeds agree within tolerance"
