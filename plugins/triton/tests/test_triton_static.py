"""kz_triton's static check: what a Triton candidate's forward path may and may not do, from the AST alone."""

from __future__ import annotations

import pytest

from kz_suites import BUILTIN_SUITE
from kz_triton.static import check_source

SOLUTIONS = BUILTIN_SUITE / "solutions" / "triton"
BUILTIN_SOLUTIONS = sorted(SOLUTIONS.glob("**/*.py"))

HEADER = """import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)
"""

MODEL_NEW = """

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.randn(8))  # compute in __init__ is not the forward path

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        #EXTRA
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out.view(x.size(0), -1)
"""

GOOD = HEADER + MODEL_NEW.replace("        #EXTRA\n", "")


def with_forward(line: str, extra_module_code: str = "") -> str:
    return HEADER + extra_module_code + MODEL_NEW.replace("#EXTRA", line)


def line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


@pytest.mark.parametrize("path", BUILTIN_SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_builtin_solution_passes(path):
    assert check_source(path.read_text()) == []


def test_builtin_solutions_exist():
    assert len(BUILTIN_SOLUTIONS) >= 36


def test_good_candidate_passes():
    assert check_source(GOOD) == []


@pytest.mark.parametrize(
    "line, expected",
    [
        ("y = torch.relu(x)", "calls `torch.relu` (PyTorch compute) in the forward path"),
        ("y = F.softmax(x, dim=-1)", "calls `F.softmax` (PyTorch compute) in the forward path"),
        ("y = torch.nn.functional.gelu(x)", "calls `torch.nn.functional.gelu` (PyTorch compute) in the forward path"),
        ("s = x.sum()", "calls tensor method `.sum()` (PyTorch compute) in the forward path"),
        ("y = x.softmax(-1)", "calls tensor method `.softmax()` (PyTorch compute) in the forward path"),
        ("y = x @ x", "`@` (matrix multiply) on tensors in the forward path"),
        ("y = self.linear(x)", "calls submodule `self.linear` (nn.Linear) instead of a kernel"),
        ("ref = Model()", "uses the reference `Model` class"),
        ("f = getattr(torch, 'relu')", "calls `getattr` in the forward path (dynamic dispatch is not allowed)"),
    ],
)
def test_forward_path_violations(line, expected):
    source = with_forward(line)
    assert check_source(source) == [f"line {line_of(source, line)}: {expected}"]


def test_try_except_anywhere_is_a_violation():
    source = GOOD + "\n\ntry:\n    import numpy\nexcept ImportError:\n    numpy = None\n"
    assert check_source(source) == [f"line {line_of(source, 'try:')}: try/except is not allowed (no fallback paths)"]


def test_missing_kernel():
    source = "import torch\nfrom torch import nn\n" + MODEL_NEW.replace("#EXTRA", "pass").replace(
        "relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)", "out.copy_(x)"
    )
    assert check_source(source) == ["no `@triton.jit` kernel defined"]


def test_kernel_under_autotune_counts():
    source = GOOD.replace("@triton.jit\n", "@triton.autotune(configs=[], key=['n'])\n@triton.jit\n")
    assert check_source(source) == []


def test_missing_model_new():
    assert check_source(HEADER + "\n\nclass Model(nn.Module):\n    pass\n") == ["no `class ModelNew` defined"]
    assert check_source(GOOD.replace("def forward(self, x):", "def run(self, x):")) == [
        "`ModelNew` has no `forward` method"
    ]


def test_calls_through_helpers_are_caught():
    helpers = """

def _prepare(x):
    return _really_prepare(x)


def _really_prepare(x):
    return torch.sigmoid(x)
"""
    source = with_forward("y = _prepare(x)", helpers)
    assert check_source(source) == [
        f"line {line_of(source, 'torch.sigmoid')}: calls `torch.sigmoid` (PyTorch compute) in the forward path"
    ]
    method = MODEL_NEW.replace("#EXTRA", "y = self._post(x)") + "\n    def _post(self, x):\n        return x.exp()\n"
    source = HEADER + method
    assert check_source(source) == [
        f"line {line_of(source, 'x.exp()')}: calls tensor method `.exp()` (PyTorch compute) in the forward path"
    ]


def test_code_not_reached_from_forward_is_not_checked():
    unused = "\n\ndef reference_for_debugging(x):\n    return torch.relu(x) @ x\n"
    assert check_source(HEADER + unused + GOOD[len(HEADER) :]) == []


def test_torch_inside_triton_kernels_is_a_kernel_violation_not_a_forward_path_one():
    """A @triton.jit body is not the forward path (`x.sum()` and `@` there are tl's), but it may name no
    other module: a compiled kernel could not run torch, and the CPU interpreter would run it unguarded."""
    kernel = """

@triton.jit
def odd_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = torch.exp(x)
    z = x.sum()
    tl.store(x_ptr + offs, tl.sum(y @ z, axis=0), mask=offs < n)


def launch(x, n):
    odd_kernel[(1,)](x, n, BLOCK=1024)
"""
    source = with_forward("launch(out, n)", kernel)
    assert check_source(source) == [
        f"line {line_of(source, 'torch.exp')}: `torch` inside @triton.jit kernel `odd_kernel`: "
        "a kernel uses triton.language only"
    ]


def test_a_kernel_calls_only_triton_its_other_kernels_and_builtins():
    kernels = """

def _host_helper():
    return 1


HELPERS = [_host_helper]


@triton.jit
def _scale(x):
    return x * 2.0


@triton.jit
def calls_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < min(n, BLOCK)).to(tl.float32)
    tl.store(x_ptr + offs, _scale(x) + _host_helper() + HELPERS[0](), mask=offs < n)


def launch(x, n):
    calls_kernel[(1,)](x, n, BLOCK=1024)
"""
    source = with_forward("launch(out, n)", kernels)
    line = line_of(source, "_host_helper() + HELPERS")
    assert sorted(check_source(source)) == [
        f"line {line}: calls `HELPERS[…]` inside @triton.jit kernel `calls_kernel`: a kernel may call only "
        "triton.language",
        f"line {line}: calls `_host_helper` inside @triton.jit kernel `calls_kernel`: a kernel may call only "
        "triton.language, other @triton.jit kernels and basic builtins",
    ]


@pytest.mark.parametrize(
    "line",
    ["y = x.numpy()", "y = x.view(-1).tolist()", "x.apply_(abs)", "y = out.map_(x, max)", "y = x.__array__()"],
)
def test_tensor_data_taken_to_the_host_in_the_forward_path(line):
    source = with_forward(line)
    name = line.split(".")[-1].split("(")[0]
    expected = f"line {line_of(source, line)}: `.{name}()` takes tensor data to Python or NumPy in the forward path"
    problems = check_source(source)
    assert expected in problems
    assert all(p == expected or "reaches into Python internals (a dunder)" in p for p in problems), problems


@pytest.mark.parametrize(
    "imported, shown",
    [
        ("from torch import _C", "torch._C"),
        ("from torch.utils._python_dispatch import _disable_current_modes", "torch.utils._python_dispatch"),
        ("import torch._dynamo as dyn", "torch._dynamo"),
        ("from sys import modules", "sys.modules"),
        ("from torch import ops", "torch.ops"),
    ],
)
def test_the_import_forms_of_private_paths_are_refused(imported, shown):
    source = imported + "\n" + GOOD
    problems = check_source(source)
    assert (
        problems
        and problems[0].startswith(f"line 1: `{shown}")
        and "reaches into PyTorch or Python internals" in problems[0]
    )


@pytest.mark.parametrize("call", ["sys.setprofile(None)", "sys.settrace(None)", "threading.setprofile(None)"])
def test_hooks_into_the_evaluators_calls_are_refused(call):
    source = "import sys\n" + GOOD + f"\n\n{call}\n"
    assert any("would run candidate code inside the evaluator's own calls" in p for p in check_source(source))


def test_syntax_error_is_left_to_the_loader():
    assert check_source("class ModelNew(:\n") == []
