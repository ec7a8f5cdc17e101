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
from tests.fakes_static import BARE, only_later_rules

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


@pytest.fixture(scope="module")
def bare_pool():
    """A pool whose static check passes everything (tests/fakes_static.py): the launch checks alone, for escapes
    that the static rules written after them refuse too."""
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton", BARE]) as pool:
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


def test_an_int_subclass_argument_is_refused_at_the_launch(bare_pool, problems):
    source = source_of("int_subclass_argument")
    assert only_later_rules(check_source(source))
    result = evaluate(bare_pool, problems["1_ReLU"], source)
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


# -- 7. names a kernel trusts, the module's globals, constexpr tensors, spoofed dtypes ------------------------


@pytest.mark.parametrize(
    "name, expected",
    [
        ("np_through_triton_module", "reaches `triton.runtime.interpreter.np.exp`"),  # NumPy on x.handle.data
        ("np_through_triton_module", "reads `.data`"),
        ("shadow_builtin", "binds `max`, which a @triton.jit kernel calls as a builtin's own"),
        ("rebound_triton_name", "binds `maximum`, which a @triton.jit kernel calls as triton's own"),
        ("call_of_call", "calls the value of an expression"),  # the check used to crash on it (IndexError)
        ("host_raw_load", "`triton.runtime.interpreter._interpreter.load`: Triton's interpreter is not part of"),
    ],
)
def test_a_kernel_reaches_only_triton_language_through_names_the_module_does_not_rebind(name, expected):
    assert any(expected in v for v in check_source(source_of(name))), check_source(source_of(name))


def test_a_kernel_may_still_read_triton_language_its_values_attributes_and_triton_s_helpers():
    source = """
import triton
import triton.language as tl
from triton.language.extra import libdevice
from torch import nn

@triton.jit
def k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n).to(x_ptr.dtype.element_ty)
    y = triton.language.math.exp(x) + libdevice.erf(x) + tl.cdiv(BLOCK, 2) + triton.cdiv(BLOCK, 2)
    tl.store(o_ptr + offs, y.to(tl.float32), mask=offs < n)

class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""
    assert check_source(source) == []


def test_an_object_of_the_candidate_s_class_among_the_kernel_module_s_globals_is_refused():
    import types

    import torch
    from triton import language as tl

    from kz_triton.runtime import module_value_problem

    class Mod(types.ModuleType):
        def __eq__(self, other):
            return False

    class Spoof:
        __module__ = "triton.language.core"  # names triton's module, which does not hold it

    import weakref
    from unittest import mock

    kept = Spoof()
    # a weakref proxy and a mock are of genuine library classes, but forward or configure `__class__` and `==`
    for value in (Mod("m"), Spoof(), weakref.proxy(kept), mock.MagicMock(spec=types.ModuleType), tl.dtype):
        assert bool(module_value_problem("v", value, "kz_candidate")) is (value is not tl.dtype)
    for value in (torch, tl, len, 3, "s", None, [1], {"a": 1}, torch.float32, tl.float32, tl.constexpr(4), source_of):
        assert module_value_problem("v", value, "kz_candidate") == "", value


def test_a_global_that_runs_code_when_the_interpreter_looks_at_it_is_refused_at_the_launch(bare_pool, problems):
    for name in ("module_global_class_property", "module_subclass_eq"):
        source = source_of(name)
        assert only_later_rules(check_source(source))
        result = evaluate(bare_pool, problems["11_Softmax"], source)
        assert result.status is Status.RUNTIME_ERROR, result.message
        assert "LaunchRefused: the kernel's module binds" in result.message


def test_a_tensor_for_a_constexpr_parameter_and_a_dtype_of_the_candidate_s_class_are_refused():
    import torch
    from triton import language as tl

    from kz_triton import runtime

    def body(x_ptr, out: tl.constexpr, n, BLOCK):
        """Only the signature is read: which parameters are constexpr."""

    body.__annotations__["BLOCK"] = "'tl.constexpr'"  # a quoted annotation under `from __future__ import annotations`

    fn = type("Interpreted", (), {"fn": staticmethod(body), "arg_names": ["x_ptr", "out", "n", "BLOCK"]})()
    x = torch.zeros(4)
    runtime._tensor_for_constexpr(fn, (x, 3, 4), {"BLOCK": 8})
    for args, kwargs in (((x, x, 4), {"BLOCK": 8}), ((x,), {"out": 1, "n": 4, "BLOCK": x})):
        with pytest.raises(TypeError, match="a tl.constexpr parameter given a tensor"):
            runtime._tensor_for_constexpr(fn, args, kwargs)

    class Spoof(tl.dtype):
        __module__ = "triton.language.core"

    with pytest.raises(TypeError, match="a launch takes tensors"):
        runtime._plain_arguments((Spoof("fp32"),), {})
    runtime._plain_arguments((tl.float32, tl.pointer_type(tl.float32)), {})


@pytest.mark.parametrize(
    "name",
    [
        "honest_reinterpret_relu",  # triton.reinterpret, a tuple argument, tl.static_assert
        "honest_host_descriptor_relu",  # a host TensorDescriptor argument
        "honest_descriptor_methods_relu",  # desc.load / desc.store
        "honest_device_descriptor_relu",  # tl.make_tensor_descriptor; the output a strided view at an offset
        "honest_atomic_table_relu",  # a module-level table passed as a tensor; atomics into the output
    ],
)
def test_honest_kernels_on_the_edges_of_the_new_rules_are_correct(triton_pool, problems, name):
    source = source_of(name)
    assert check_source(source) == []
    result = evaluate(triton_pool, problems["1_ReLU"], source)
    assert result.status is Status.CORRECT, result.message


def test_the_kernel_method_list_covers_triton_s_tensor_descriptor():
    from triton import language as tl

    from kz_triton.static import KERNEL_METHODS, VALUE_ATTRIBUTES

    names = {n for n in dir(tl.core.tensor_descriptor_base) if not n.startswith("_")}
    assert names <= KERNEL_METHODS | VALUE_ATTRIBUTES


def test_a_kernel_reads_and_writes_only_its_launch_s_tensor_arguments(triton_pool, problems):
    """Under the CPU interpreter a pointer is a host address in the evaluator's own process: one kernel scanned
    memory for the reference's live output in the timed pairs and copied it; another found the inputs the
    reference was about to run on and zeroed them with its own. Every interpreted load and store must fall inside
    a tensor argument of its launch (`kz_triton.runtime._BoundedMemory`)."""
    expected = {
        "read_reference_output": "lies outside every tensor argument of its launch",
        "rewrite_reference_inputs": "lies outside every tensor argument of its launch",
        # a meta tensor among the keywords (dropped by the interpreter) once turned the bound off
        "unbound_by_a_meta_argument": "lies outside every tensor argument of its launch",
        # kernels deleted from the module's namespace are never instrumented: their launches have no bound
        "hidden_kernel": "outside every instrumented launch",
    }
    for name, message in expected.items():
        source = source_of(name)
        assert check_source(source) == []
        result = evaluate(triton_pool, problems["1_ReLU"], source)
        assert result.status is Status.RUNTIME_ERROR, result.message
        assert message in result.message, (name, result.message)


def test_the_access_bounds_follow_each_launch_s_arguments():
    import numpy as np
    import torch

    from kz_triton import runtime

    x, y = torch.zeros(8), torch.zeros(4, dtype=torch.float64)
    ranges = runtime._argument_ranges((x, 3, (y,)), {"unused": torch.zeros(100)}, names=["x", "n", "ys", "BLOCK"])
    assert sorted(ranges) == sorted([(x.data_ptr(), x.data_ptr() + 32), (y.data_ptr(), y.data_ptr() + 32)])
    with pytest.raises(TypeError, match="under the CPU interpreter a launch takes CPU tensors only"):
        runtime._argument_ranges((x,), {"extra": torch.empty(1, device="meta")})  # it used to lift the bound
    with pytest.raises(runtime.MemoryAccessRefused, match="outside every instrumented launch"):
        runtime._check_access(np.array([x.data_ptr()], dtype=np.uint64), None, 4, "load")  # no launch: nothing
    runtime._MEMORY_SCOPES.append(ranges)
    try:
        inside = np.array([x.data_ptr(), x.data_ptr() + 28, y.data_ptr() + 24], dtype=np.uint64)
        runtime._check_access(inside, None, 4, "load")
        past = np.array([x.data_ptr() + 32], dtype=np.uint64)
        with pytest.raises(runtime.MemoryAccessRefused, match="lies outside every tensor argument"):
            runtime._check_access(past, None, 4, "store")
        runtime._check_access(past, np.array([False]), 4, "store")  # masked off: not accessed
    finally:
        runtime._MEMORY_SCOPES.pop()
