"""Ways for a candidate's Python to run inside an interpreted launch (CPU: TRITON_INTERPRET=1, where the kernel
body is Python run with the op guard suspended), each refused for its whole class: statically where the
source shows it (kz_triton.static), at the launch where it does not (kz_triton.runtime); and honest kernels
that those rules must keep passing. The candidates are in escapes/."""

from __future__ import annotations

from pathlib import Path

import pytest

from kz_triton.static import TENSOR_METHODS, check_source
from kzcore.executors.local import LocalPool
from kzcore.plugins import new_plugin_manager
from kzcore.problems import load_problems
from kzcore.types import Candidate, EvalConfig, EvalJob, Status

ESCAPES = Path(__file__).parent / "escapes"
CONFIG = EvalConfig(device="cpu", timeout_s=170)


def source_of(name: str) -> str:
    return (ESCAPES / f"{name}.py").read_text()


@pytest.fixture(scope="module")
def problems():
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    return {p.name: p for p in load_problems("builtin", pm=pm)}


@pytest.fixture(scope="module")
def triton_pool():
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton"]) as pool:
        yield pool


def evaluate(pool, problem, source):
    cand = Candidate(problem=problem.name, language="triton", level=problem.level, source=source)
    (result,) = pool.map([EvalJob(problem, cand, CONFIG)])
    return result


# -- 1. launch arguments and what the body does with them -------------------------------------------------


def test_a_method_call_on_a_kernel_argument_must_be_triton_s():
    problems = check_source(source_of("method_on_argument"))
    assert any(
        "calls `OUT.copy_` inside @triton.jit kernel `relu_kernel`: a method call on a kernel's values may only be "
        "one of triton.language's" in p
        for p in problems
    ), problems
    honest = source_of("honest_heuristics_relu").replace(
        "offs = tl.program_id(0) * BLOCK", "offs = tl.program_id(0).to(tl.int64) * BLOCK"
    )
    assert check_source(honest) == []


def test_the_kernel_method_list_covers_triton_s_tensor():
    from triton import language as tl

    assert {n for n in dir(tl.tensor) if not n.startswith("_")} <= TENSOR_METHODS


def test_launch_arguments_must_be_exactly_plain():
    import torch
    from triton import language as tl

    from kz_triton import runtime

    class Int(int):
        """An int whose methods would be the candidate's."""

    class Constexpr(tl.constexpr):
        """A constexpr whose methods would be the candidate's."""

    x = torch.zeros(2)
    runtime._plain_arguments((x, 3, 1.5, True, None, "s", torch.float32, tl.float16, (1, 2)), {"B": tl.constexpr(4)})
    for bad in (Int(3), Constexpr(1), tl.constexpr(x), tl.constexpr(len), tl.constexpr(Int(1)), (1, Int(2)), [1]):
        with pytest.raises(TypeError, match="a launch takes tensors, numbers, strings and dtypes"):
            runtime._plain_arguments((x, bad), {})


def test_an_int_subclass_argument_is_refused_at_the_launch(triton_pool, problems):
    source = source_of("int_subclass_argument")
    assert check_source(source) == []
    result = evaluate(triton_pool, problems["1_ReLU"], source)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "TypeError: kernel argument 1 is a Count: a launch takes tensors" in result.message


# -- 2. names the interpreter puts in the kernel's module ----------------------------------------------------


def test_a_module_binding_of_an_interpreter_name_is_refused():
    problems = check_source(source_of("shadow_interpreter_name"))
    assert any("binds `interpreter_semantic` at module level, a name Triton's interpreter puts" in p for p in problems)
    bindings = [
        "class _InterpreterComparison:\n    pass\n",
        "def interpreter_builder():\n    pass\n",
        "def _set(v):\n    global interpreter_semantic\n    interpreter_semantic = v\n",
        "for interpreter_semantic in range(1):\n    pass\n",
        "from torch import nn as interpreter_other\n",
    ]
    for binding in bindings:
        problems = check_source(source_of("honest_heuristics_relu") + "\n\n" + binding)
        assert any("a name Triton's interpreter puts in the kernel's module" in p for p in problems), binding
    # the same module the interpreter imports under that name is the same object
    assert check_source("import math\nimport numpy as np\n" + source_of("honest_heuristics_relu")) == []


def test_an_interpreter_global_rebound_in_the_module_is_refused_at_the_launch():
    """The launch-time side: each injected name in the kernel's module must be the interpreter's own."""
    import types

    from kz_triton import runtime

    snap = runtime._interpreter_snapshot()
    module = types.ModuleType("fake_candidate")
    module.interpreter_semantic = object()
    with pytest.raises(runtime.LaunchRefused, match="binds `interpreter_semantic`, a name Triton's interpreter"):
        runtime._Launch(module, None, None, set())._injected_globals(snap)
    module.interpreter_semantic = snap["globals"]["interpreter_semantic"]
    runtime._Launch(module, None, None, set())._injected_globals(snap)


# -- 3. the source and the rewrite the interpreter runs ----------------------------------------------------


def test_a_poisoned_rewrite_cache_is_refused_at_the_launch(triton_pool, problems):
    source = source_of("rewrite_cache")
    assert check_source(source) == []
    result = evaluate(triton_pool, problems["1_ReLU"], source)
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "kernel `noop_kernel`: the interpreter's rewrite cache holds a function that is not its rewrite" in (
        result.message
    )


# -- 4. kernels made by calling triton.jit --------------------------------------------------------------------


def test_jit_applied_by_a_call_is_refused():
    problems = check_source(source_of("jit_by_call"))
    assert any("`triton.jit` used other than as the decorator of a module-level function" in p for p in problems)
    autotuned = (
        source_of("honest_heuristics_relu") + "\n\ntuned = triton.autotune(configs=[], key=['n'])(relu_kernel)\n"
    )
    assert any("`triton.autotune` used other than as the decorator" in p for p in check_source(autotuned))


# -- 5. module-level values named in a kernel body ---------------------------------------------------------------


def test_a_kernel_names_only_kernels_constants_and_triton():
    problems = check_source(source_of("host_combine"))
    assert any(
        "`Combine` inside @triton.jit kernel `sum_kernel` is a module-level value: a kernel may name only triton" in p
        for p in problems
    ), problems
    constant = source_of("honest_heuristics_relu").replace("MAX_BLOCK = 1024", "MAX_BLOCK = tl.constexpr(1024)")
    assert check_source(constant) == []


# -- 6. honest kernels --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, problem", [("honest_heuristics_relu", "1_ReLU"), ("honest_prehook_matmul", "19_Matmul")]
)
def test_honest_kernels_with_decorator_lambdas_are_correct(triton_pool, problems, name, problem):
    source = source_of(name)
    assert check_source(source) == []
    result = evaluate(triton_pool, problems[problem], source)
    assert result.status is Status.CORRECT, result.message
