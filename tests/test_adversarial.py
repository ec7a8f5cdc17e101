"""Reward hacks against the real evaluator (spawned workers, Triton interpreter and NVRTC on CPU), one
candidate module per cheat in tests/adversarial/ (CUDA ones in tests/adversarial/cuda/), and legitimate
kernels in tests/legit/ that must not be flagged.

Every cheat test names the defence it relies on; with that defence removed the candidate is judged
`correct` (checked when the test was written by switching each runtime defence off in a worker plugin), so
each test fails without it. Cheats the static check catches are also written so that the runtime layer
behind it is tested on its own: those files evade the static check on purpose, and their tests assert so.
test_evaluator.py covers the older cheats (zeros, half-written empty, in-place input, hidden op, no launch,
try/except, threads, tampering with the guard).
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from kz_cuda.static import check_source as cuda_check_source
from kz_triton.static import check_source
from kzcore.evaluate import integrity
from kzcore.executors.local import LocalPool
from kzcore.plugins import new_plugin_manager
from kzcore.problems import load_problems
from kzcore.types import Candidate, EvalConfig, EvalJob, EvalResult, Problem, Status
from tests.fakes_static import BARE, only_later_rules

HERE = Path(__file__).resolve().parent
ADVERSARIAL = HERE / "adversarial"
LEGIT = HERE / "legit"
CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=60)

# A problem whose output rows are all equal (materialised), so a kernel can compute one row and return it
# expanded: only a check on the output's strides tells the two apart.
COLUMN_SUM_REPEATED = Problem(
    name="ColumnSumRepeated",
    level=1,
    source='''"""Column sums, repeated on every row."""

import torch
from torch import nn

rows = 16
cols = 300


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=0, keepdim=True).repeat(x.shape[0], 1)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
''',
)

# legitimate kernel module -> the built-in problem it solves
LEGIT_PROBLEMS = {
    "tiled_matmul": "19_Matmul",
    "fused_softmax": "11_Softmax",
    "layernorm": "13_LayerNorm",
    "muladd_fixed_block": "6_MulAdd",
    "sum_reduction": "7_SumReduction",
    "empty_explicit_shape": "3_Sigmoid",
    "views_reshape": "4_LeakyReLU",
    "helper_class_attr": "9_MaxReduction",
    "two_kernels": "5_Matmul_Divide_Sum",
    "empty_like_grid_lambda": "5_Softplus",
    "linear_bias": "23_Linear",
    "argmax_int64": "10_Argmax",
    "transposed_b_strides": "20_MatmulTransposedB",
    "l1norm_rows": "18_L1NormRows",
    "softmax_dtype_methods": "11_Softmax",
}


def source_of(kind: str) -> str:
    return (ADVERSARIAL / f"{kind}.py").read_text()


@pytest.fixture(scope="module")
def problems() -> dict[str, Problem]:
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    found = {p.name: p for p in load_problems("builtin", pm=pm)}
    return {**found, COLUMN_SUM_REPEATED.name: COLUMN_SUM_REPEATED}


@pytest.fixture(scope="module")
def triton_pool():
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton"]) as pool:
        yield pool


@pytest.fixture(scope="module")
def bare_pool():
    """A pool whose static check passes everything (tests/fakes_static.py): the run-time layer alone."""
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton", BARE]) as pool:
        yield pool


def past_the_static_check(kind: str) -> str:
    """``kind``'s source, after checking that the static check refuses it by none of its rules but the later ones
    (tests/fakes_static.py), or not at all: it runs through `bare_pool`, and the run-time layer is what the test
    measures."""
    source = source_of(kind)
    problems = check_source(source)
    assert only_later_rules(problems), problems
    return source


@pytest.fixture(scope="module")
def cuda_pool(own_workers):
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_cuda"]) as pool:
        yield pool


def run_one(pool: LocalPool, problem: Problem, source: str, language: str = "triton") -> EvalResult:
    cand = Candidate(problem=problem.name, language=language, level=problem.level, source=source)
    (result,) = pool.map([EvalJob(problem, cand, CONFIG)])
    return result


# ------------------------------------------------------------------------------------------------------
# Triton: caught by the static check (kzcore.evaluate.static.escape_violations and the import rules)
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, problem, expected",
    [
        # (f) computed getattr: escape_violations' getattr rule
        ("getattr_matmul", "19_Matmul", "`getattr` with a computed or private attribute name is not allowed"),
        # (f) namespace lookup: escape_violations' ESCAPE_NAMES (`__dict__`)
        ("dict_matmul", "19_Matmul", "`torch.__dict__` reaches into Python internals"),
        # (f) importing the reference module by path: FORBIDDEN_IMPORTS (importlib)
        ("reference_model", "1_ReLU", "importing `importlib.util` is not allowed"),
        # (c) side stream: escape_violations' STREAM_NAMES
        ("side_stream", "1_ReLU", "`torch.cuda.Stream`: side CUDA streams are not allowed"),
        # (d) torch function mode: escape_violations' OVERRIDE_NAMES and the Tensor/Mode subclass rule
        ("torch_function", "1_ReLU", "class `ReluIsACopy` subclasses `TorchFunctionMode`"),
        # host compute: NumPy on `.numpy()`, copied back by a kernel (static.METHOD_HOST)
        ("numpy_host_compute", "19_Matmul", "`.numpy()` takes tensor data to Python or NumPy in the forward path"),
        # torch inside a @triton.jit body (the CPU interpreter runs it as Python): kz_triton.static.kernel_violations
        ("kernel_body_torch", "11_Softmax", "`torch` inside @triton.jit kernel `softmax_kernel`"),
        ("kernel_body_helper", "11_Softmax", "calls `_finish` inside @triton.jit kernel `softmax_kernel`"),
        # the guard's dispatch mode switched off by a private torch name in `from` form (the import rule)
        ("disable_modes_import", "1_ReLU", "`torch.utils._python_dispatch._disable_current_modes` reaches into"),
        # a profile hook that runs the candidate's code inside the launch (HOOK_NAMES)
        ("profile_hook", "1_ReLU", "`sys.setprofile` would run candidate code inside the evaluator's own calls"),
        # a name the interpreter adds to the module's namespace (`np`), used in a kernel body
        ("kernel_injected_np", "19_Matmul", "`np` inside @triton.jit kernel `mm_kernel` is bound nowhere"),
        # the output check's norm patched through an alias (`lin = torch.linalg`): the alias rule
        ("alias_patch_linalg", "19_Matmul", "assigns to `lin.vector_norm` (monkey-patching is not allowed)"),
        # host views on tensor memory: `__array_interface__` answered by `__getattr__`; DLPack; super() past a wrapper
        ("getattr_array_interface", "19_Matmul", "`__getattr__` reaches into Python internals"),
        ("dlpack_host_compute", "19_Matmul", "`torch.utils.dlpack` reaches into Python internals"),
        ("super_numpy", "19_Matmul", "`super(torch.Tensor, …)` names no class of this module"),
        ("super_type_of", "1_ReLU", "`super(…, …)` names no class of this module"),
        # host compute reached without `.numpy()`: NumPy over tensor memory, serialisation, a dunder set by setattr
        ("numpy_over_tensor_memory", "3_Sigmoid", "`np.exp`: NumPy may only allocate in a kernel module"),
        ("torch_save_bytes", "11_Softmax", "`torch.save` reaches into PyTorch or Python internals"),
        ("setattr_dunder", "19_Matmul", "`setattr` with a computed or private attribute name is not allowed"),
        # a custom operator named like an allowed one; C++ built on the host (statically; the op guard: below)
        ("custom_op_named_clone", "11_Softmax", "`torch.library.custom_op` reaches into PyTorch or Python"),
        ("host_cpp_build", "1_ReLU", "`torch.utils.cpp_extension.load_inline` reaches into PyTorch or Python"),
        # an attribute fetched by a computed name without getattr; source text the interpreter re-reads
        ("formatter_fetch", "1_ReLU", "importing `string` is not allowed in a kernel module"),
        ("linecache_source", "1_ReLU", "importing `linecache` is not allowed in a kernel module"),
        # the op guard's dispatch switched off through a private torch module named by attribute path
        ("no_dispatch_helper", "11_Softmax", "`torch.utils._mode_utils.no_dispatch` reaches into PyTorch"),
        # a tensor's memory shared as a file, read and written by descriptor on the host
        ("shared_fd_host", "1_ReLU", "`._share_fd_cpu_` reaches into Python internals"),
        # a C twin of a banned module: a weakref proxy among the module's globals forwarded `__class__` reads
        ("weakref_proxy_global", "11_Softmax", "importing `_weakref`, a private module, is not allowed"),
        # Python run inside the suspended launch: NumPy's error callback, NumPy reached through another module's
        ("numpy_errcall_relu", "1_ReLU", "`fz.np` reaches a module through another one"),
        # the evaluator's frames (the job's tolerances swapped); modules fetched by a string (the guard's depth
        # counter set, the interpreter's memory bound shadowed)
        ("frame_config_relu", "1_ReLU", "importing `pdb` is not allowed in a kernel module"),
        ("resolve_name_guard_relu", "1_ReLU", "importing `pkgutil` is not allowed in a kernel module"),
        ("resolve_name_unbound_relu", "1_ReLU", "importing `pkgutil` is not allowed in a kernel module"),
    ],
)
def test_triton_cheat_fails_the_static_check(triton_pool, problems, kind, problem, expected):
    result = run_one(triton_pool, problems[problem], source_of(kind))
    assert result.status is Status.STATIC_CHECK_FAILED, result.message
    assert expected in result.message
    assert set(result.stages) == {"static"}  # nothing was imported or run


# ------------------------------------------------------------------------------------------------------
# Triton: caught by the runtime op guard (guard.ComputeOpRecorder), past a clean static check
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, problem, op",
    [
        ("reference_copy", "1_ReLU", "aten.relu"),  # (f) a copy of the reference Model run in forward
        ("operator_matmul", "19_Matmul", "aten.mm"),  # (f) operator.matmul under another name
        ("mul_operator", "6_MulAdd", "aten.mul"),  # (f) operator syntax `a * b`
    ],
)
def test_triton_torch_compute_past_the_static_check_is_caught_by_the_op_guard(triton_pool, problems, kind, problem, op):
    source = source_of(kind)
    assert check_source(source) == []
    result = run_one(triton_pool, problems[problem], source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "forward ran PyTorch compute operators outside its kernels" in result.message and op in result.message


@pytest.mark.parametrize(
    "kind, problem, op",
    [
        ("unguarded_timed_relu", "1_ReLU", "aten.relu"),  # torch where a fresh allocation is not NaN-filled
        ("unguarded_timed_matmul", "19_Matmul", "aten.mm"),  # the same from its second such call on
    ],
)
def test_torch_compute_only_where_the_guard_seems_off_is_caught_in_the_timed_calls(
    triton_pool, problems, kind, problem, op
):
    """The forward tells its trials (allocations NaN-filled by the guard) from the timed calls, and computes with
    PyTorch only in the latter: the timed calls run under the same guard (filling nothing)."""
    source = source_of(kind)
    assert check_source(source) == []
    result = run_one(triton_pool, problems[problem], source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.startswith("a timed call of the candidate ran PyTorch compute"), result.message
    assert op in result.message


@pytest.mark.parametrize(
    "kind, problem, expected",
    [
        # fp16 the default dtype while trial 0 draws its inputs, then fp32 again: trial 0 is no fp32 problem
        ("default_dtype_flip_relu", "1_ReLU", "after its construction, the candidate's code changed precision"),
        # autocast switched on process-wide: the reference's matmul runs in bf16 beside the candidate's
        ("autocast_matmul", "19_Matmul", "changed precision setting(s) autocast on cpu"),
        # a SIGALRM handler that computes the output with torch inside the interpreted launch (guard suspended)
        ("signal_handler_relu", "1_ReLU", "after its construction, the candidate's code set the handler of SIGALRM"),
    ],
)
def test_process_precision_switched_by_the_candidate_is_caught(bare_pool, problems, kind, problem, expected):
    result = run_one(bare_pool, problems[problem], past_the_static_check(kind))
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert expected in result.message, result.message


def test_host_compute_past_the_static_check_is_caught_by_the_op_guard(triton_pool, problems):
    """`tolist()` behind a helper the static walk does not follow: the guard records `Tensor.tolist`, a host
    escape no dispatch mode could see (guard.HOST_ESCAPES)."""
    source = source_of("tolist_host_compute")
    assert check_source(source) == []
    result = run_one(triton_pool, problems["2_GELU"], source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.endswith("took tensor data to Python: Tensor.tolist"), result.message


@pytest.mark.parametrize(
    "kind, expected",
    [
        # the interpreter reads a launch argument through its own methods, inside the suspended launch
        ("fake_tensor_argument", "TypeError: kernel argument 0 is a Lazy: a launch takes tensors, numbers"),
        ("grid_object", "TypeError: a kernel's grid must hold ints, not Blocks"),
        # tensor bytes read and written through procfs at data_ptr() (caches.deny_process_memory)
        ("proc_self_mem", "PermissionError: [Errno 13] evaluator workers may not open a process's memory"),
    ],
)
def test_ways_into_the_interpreted_launch_or_process_memory_fail_the_candidate(bare_pool, problems, kind, expected):
    source = past_the_static_check(kind)
    result = run_one(bare_pool, problems["19_Matmul"], source)
    assert result.status is Status.RUNTIME_ERROR and expected in result.message, result.message


def test_an_operator_outside_aten_is_recorded_whatever_its_name():
    """A custom operator called ``clone`` (an allowed name) runs a Python implementation whose own operators the
    dispatch mode does not see: it is recorded by its qualified name, never matched against ATen's list."""
    import torch

    from kzcore.evaluate import guard

    lib = torch.library.Library("kztest_guard", "DEF")
    lib.define("clone(Tensor x) -> Tensor")
    lib.impl("clone", lambda x: torch.softmax(x, dim=-1), "CompositeExplicitAutograd")
    x = torch.randn(4, 8)
    with guard.recorder() as rec:
        y = torch.ops.kztest_guard.clone(x)
        x.clone()  # ATen's own: allowed
    assert torch.allclose(y, torch.softmax(x, dim=-1))
    assert rec.forbidden == ["kztest_guard::clone"]


def test_values_read_one_by_one_on_the_host_are_caught_by_the_op_guard(triton_pool, problems):
    """Every element read with `.item()` (each an allowed scalar read): past guard.SCALAR_READS in one forward
    the guard records it."""
    source = source_of("item_loop")
    assert check_source(source) == []
    result = run_one(triton_pool, problems["1_ReLU"], source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.endswith("Tensor.item (more than 64 values read one by one)"), result.message


def test_a_memoriser_of_the_trials_inputs_misses_under_the_secret_salt(problems, own_workers):
    """The trials' inputs follow public seeds; a candidate that replays them in `__init__` and looks its input
    up passes every trial with a wrong kernel unless the evaluation salts them with a secret drawn after the
    candidate is built (EvalConfig.secret_inputs). Without the salt the same candidate is `correct`: the
    defence, not the candidate, is what fails it."""
    source = past_the_static_check("precomputed_trials")
    plain = EvalConfig(device="cpu", trials=5, timeout_s=60, second_shape="")
    cand = Candidate(problem="5_Softplus", language="triton", level=1, source=source)
    problem = problems["5_Softplus"]
    with LocalPool(workers=1, config=plain, plugins=["kz_triton", BARE]) as pool:
        open_seeds, salted = pool.map(
            [EvalJob(problem, cand, attrs.evolve(plain, secret_inputs=False)), EvalJob(problem, cand, plain)]
        )
    assert open_seeds.status is Status.CORRECT and open_seeds.input_salt == 0, open_seeds.message
    assert salted.status is Status.INCORRECT and salted.input_salt > 0, salted.message
    assert salted.message.startswith("trial 1 (input 0 x-"), salted.message  # scaled by 10-100: |x| > 12


# ------------------------------------------------------------------------------------------------------
# Triton: caught by tamper detection (integrity.Watch, checked by the pipeline after import, trials, timing)
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, names",
    [
        ("patch_sync", ["torch.cuda.synchronize"]),  # (c)/(e) the timer's wait made a no-op
        ("patch_timer", ["time.perf_counter", "torch.cuda.Event.elapsed_time"]),  # (e) timers
        # (e) comparisons; `any` is inherited by torch.Tensor, so setting it there adds a shadowing name
        ("patch_allclose", ["torch.allclose", "torch.equal", "torch.Tensor.any"]),
        ("tamper_evaluator", ["kzcore.builtins.outputs.compare"]),  # (e) the evaluator's own output check
        # the evaluator's randomness: the trials' secret salt and the timed pairs' draws
        ("patch_salt", ["secrets.randbits", "random.SystemRandom"]),
        # the output check's norms, and a Triton language function (it would run inside the launch)
        ("patch_checker", ["torch.linalg.vector_norm", "triton.language.debug_barrier"]),
    ],
)
def test_triton_monkey_patching_is_hack_suspected_and_the_worker_replaced(
    bare_pool, problems, kind, names, worker_replacement
):
    source = past_the_static_check(kind)  # the patches are reached through bindings the AST rules do not follow
    replaced_before = bare_pool.replaced
    result = run_one(bare_pool, problems["1_ReLU"], source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.startswith("after its import, the candidate's code replaced"), result.message
    for name in names:
        assert f"`{name}`" in result.message
    assert "candidate" not in result.stages  # found before any trial ran
    assert bare_pool.replaced == replaced_before + 1  # a tampered process evaluates nothing more


@pytest.mark.parametrize(
    "kind, problem, found",
    [
        # the problem's own Model.forward replaced (found through `sys` bound by a subscript): the reference slowed
        ("slow_reference", "1_ReLU", "changed the problem or its reference model: `Model.forward`"),
        # torch.nn.LayerNorm.forward replaced at import through an alias: every layer class is watched
        ("slow_layer_class", "13_LayerNorm", "replaced `torch.nn.LayerNorm.forward`"),
        # a process-wide nn.Module forward pre-hook: runs inside the reference's every call
        ("global_hook_reference", "1_ReLU", "registered process-wide nn.Module hook(s) in `_global_forward_pre_hooks`"),
        # a one-shot process-wide hook that leaves a pre-hook on the reference instance, then removes itself
        (
            "instance_hook_reference",
            "1_ReLU",
            "changed the problem or its reference model: `reference._forward_pre_hooks.",
        ),
        # a one-shot hook left by every candidate call, gone after the reference's next call: seen right after the call
        (
            "oneshot_hook_reference",
            "1_ReLU",
            "right after a timed call of the candidate: the candidate's code registered process-wide nn.Module hook(s)",
        ),
        # get_inputs replaced by one that zeroes every input: a zeros kernel then matches relu(0)
        ("trivial_inputs", "1_ReLU", "changed the problem or its reference model: `problem.get_inputs`"),
        # cuDNN switched off process-wide at import (a call): every cuDNN reference slowed
        ("cudnn_off", "1_ReLU", "changed process setting(s) torch.backends.cudnn.enabled (True to False)"),
        # the flash attention kernel switched off in the constructor: an attention reference slowed
        (
            "attention_off",
            "1_ReLU",
            "the candidate's code changed process setting(s) flash",
        ),
        # a one-shot hook zeroes the reference's LayerNorm weight (and its own): both output the bias alone
        ("zeroed_weights", "13_LayerNorm", "changed the values of the reference's `reference.ln.weight`"),
    ],
)
def test_triton_changing_the_reference_or_its_inputs_is_hack_suspected(
    bare_pool, problems, kind, problem, found, worker_replacement
):
    """The other side of the comparison is the candidate's to leave alone (kzcore.evaluate.refwatch): each of
    these is judged `correct` when the problem watch is off; the tampered worker is replaced."""
    source = past_the_static_check(kind)
    replaced_before = bare_pool.replaced
    result = run_one(bare_pool, problems[problem], source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert found in result.message, result.message
    assert bare_pool.replaced == replaced_before + 1


def test_triton_thread_started_past_the_static_check_is_hack_suspected(bare_pool, problems, worker_replacement):
    """(c) torch.relu on a thread (the op guard's mode is per thread): integrity's count of thread starts
    from candidate code outside kernel launches."""
    source = past_the_static_check("thread_hidden")
    result = run_one(bare_pool, problems["1_ReLU"], source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert re.search(r"started \d+ Python thread\(s\) outside its kernel launches", result.message), result.message


# ------------------------------------------------------------------------------------------------------
# Triton: caught by the output checks (builtins/outputs.py) and the tolerance
# ------------------------------------------------------------------------------------------------------


def test_triton_lazy_tensor_subclass_output_is_incorrect(bare_pool, problems):
    """(d) the type check (plain torch.Tensor only): without it the deferred kernel runs inside the
    comparison and the output matches."""
    source = past_the_static_check("lazy_subclass")
    result = run_one(bare_pool, problems["1_ReLU"], source)
    assert result.status is Status.INCORRECT, result.message
    assert "output is Deferred, expected a plain torch.Tensor" in result.message


def test_triton_expanded_view_output_is_incorrect(triton_pool, problems):
    """(d)/(g) the broadcast-view check (stride 0 where the reference has none): the values are right."""
    result = run_one(triton_pool, problems["ColumnSumRepeated"], source_of("expand_output"))
    assert result.status is Status.INCORRECT, result.message
    assert "output is a broadcast view (stride 0 in dim(s) [0])" in result.message


def test_triton_partial_work_is_incorrect(triton_pool, problems):
    """(g) half the rows done, into torch.zeros (never poisoned): the elementwise comparison."""
    result = run_one(triton_pool, problems["1_ReLU"], source_of("partial_work"))
    assert result.status is Status.INCORRECT, result.message
    assert re.match(r"trial 0: output: \d+ of \d+ elements outside atol", result.message), result.message


def test_triton_fp16_compute_beyond_the_fp32_tolerance_is_incorrect(triton_pool, problems):
    """(i) fp16 running sum on an fp32 problem: the fp32 tolerance (an fp16 tolerance would let it pass)."""
    result = run_one(triton_pool, problems["16_Cumsum"], source_of("low_precision"))
    assert result.status is Status.INCORRECT, result.message
    assert "elements outside atol=0.01 rtol=0.01" in result.message


# ------------------------------------------------------------------------------------------------------
# integrity.Watch in this process: what no candidate can reach past the static check end to end
# ------------------------------------------------------------------------------------------------------


def test_watch_reports_a_torch_function_mode_left_on():
    from torch.overrides import TorchFunctionMode

    watch = integrity.Watch()
    assert watch.findings() == []
    mode = TorchFunctionMode()
    mode.__enter__()
    try:
        assert any("left torch mode(s) TorchFunctionMode switched on" in f for f in watch.findings())
    finally:
        mode.__exit__(None, None, None)
    assert watch.findings() == []


def test_watch_reports_a_flipped_precision_switch():
    import torch

    watch = integrity.Watch()
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = not before
    try:
        assert watch.findings() == ["changed precision setting(s) torch.backends.cudnn.allow_tf32"]
    finally:
        torch.backends.cudnn.allow_tf32 = before


def test_watch_reports_replacement_but_accepts_torchs_own_wrapper(monkeypatch):
    import functools

    import torch

    watch = integrity.Watch()
    original = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", functools.wraps(original)(lambda *a, **k: None))
    assert watch.findings() == ["replaced `torch.cuda.synchronize` (monkey-patching the evaluator, timers or torch)"]
    # torch._dynamo's wrappers (code in torch's directory, __wrapped__ = the original) are not tampering
    monkeypatch.setattr(torch.cuda, "synchronize", torch._disable_dynamo(original))
    assert watch.findings() == []


def test_watch_judges_names_added_during_its_own_evaluation_not_before(monkeypatch):
    """A name a library bound on a watched class between two jobs (transformers puts ``smart_apply`` on
    ``nn.Module`` when it builds a model) is not the next candidate's doing; one bound after the Watch began
    is still reported. (Before, the names were recorded once per process, and every evaluation after a
    transformers model was built in that process was filed hack_suspected.)"""
    from torch import nn

    integrity.Watch()  # the baseline exists
    monkeypatch.setattr(nn.Module, "kz_test_lazily_added", lambda self: None, raising=False)
    watch = integrity.Watch()
    assert watch.findings() == []
    monkeypatch.setattr(nn.Module, "kz_test_added_by_candidate", lambda self: None, raising=False)
    assert watch.findings() == [
        "added `torch.nn.Module.kz_test_added_by_candidate` (monkey-patching the evaluator, timers or torch)"
    ]


# ------------------------------------------------------------------------------------------------------
# CUDA on CPU: static verdicts and what is decided before the first launch (NVRTC compiles without a GPU)
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, problem, expected",
    [
        ("torch_matmul", "19_Matmul", "calls `torch.matmul` (PyTorch compute) in the forward path"),  # (f)
        ("side_stream", "1_ReLU", "`torch.cuda.Stream`: side CUDA streams are not allowed"),  # (c)
        ("try_fallback", "1_ReLU", "try/except is not allowed (no fallback paths)"),  # (h)
        ("thread_offload", "1_ReLU", "importing `threading` is not allowed in a kernel module"),  # (c)
    ],
)
def test_cuda_cheat_fails_the_static_check(cuda_pool, problems, kind, problem, expected):
    source = source_of(f"cuda/{kind}")
    assert any(expected in p for p in cuda_check_source(source))
    result = run_one(cuda_pool, problems[problem], source, language="cuda")
    assert result.status is Status.STATIC_CHECK_FAILED, result.message
    assert expected in result.message


def test_cuda_kernel_never_launched_is_hack_suspected_on_cpu(cuda_pool, problems):
    """(g) launch counting (kz_cuda's per-module counter): forward returns before any launch, so the verdict
    needs no GPU."""
    source = source_of("cuda/never_launched")
    assert cuda_check_source(source) == []
    result = run_one(cuda_pool, problems["1_ReLU"], source, language="cuda")
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "launched none of the candidate's own cuda kernels" in result.message


def test_cuda_timer_patching_is_hack_suspected_on_cpu(own_workers, problems):
    """(e) integrity.Watch after import: the patch happens when the module loads, before any launch."""
    source = source_of("cuda/patch_timer")
    assert only_later_rules(cuda_check_source(source))
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_cuda", BARE]) as pool:
        result = run_one(pool, problems["1_ReLU"], source, language="cuda")
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "`time.perf_counter`" in result.message and "`torch.cuda.Event.elapsed_time`" in result.message


# ------------------------------------------------------------------------------------------------------
# CUDA on a GPU: the runtime verdicts (run on the GPU machine)
# ------------------------------------------------------------------------------------------------------

GPU_CONFIG = EvalConfig(device="cuda", size="small", trials=2, reps=10, max_timing_s=1.0, timeout_s=120)
CUDA_RUNTIME_CHEATS = {
    # kind: (problem, expected status, message fragment); the defence is named beside each
    "hidden_matmul": ("19_Matmul", Status.HACK_SUSPECTED, "aten.mm"),  # op guard
    "reference_copy": ("1_ReLU", Status.HACK_SUSPECTED, "aten.relu"),  # op guard
    "inplace_input": ("1_ReLU", Status.HACK_SUSPECTED, "modified its input(s) [0]"),  # input comparison
    "partial_write_empty": ("1_ReLU", Status.INCORRECT, "NaN values where the reference has none"),  # poison
    "lazy_subclass": ("1_ReLU", Status.INCORRECT, "output is Deferred, expected a plain torch.Tensor"),  # type
    "low_precision": ("16_Cumsum", Status.INCORRECT, "elements outside atol"),  # fp32 tolerance
}


@pytest.mark.gpu
def test_cuda_runtime_cheats_on_the_gpu(problems):
    jobs = []
    for sample, (kind, (problem, _, _)) in enumerate(CUDA_RUNTIME_CHEATS.items()):
        source = source_of(f"cuda/{kind}")
        assert cuda_check_source(source) == [], kind
        cand = Candidate(
            problem=problem, language="cuda", level=problems[problem].level, sample=sample, source=source, origin=kind
        )
        jobs.append(EvalJob(problems[problem], cand, GPU_CONFIG))
    with LocalPool(workers=1, config=GPU_CONFIG, plugins=["kz_cuda"]) as pool:
        results = {r.origin: r for r in pool.map(jobs)}
    for kind, (_, status, fragment) in CUDA_RUNTIME_CHEATS.items():
        assert results[kind].status is status, (kind, results[kind].status, results[kind].message)
        assert fragment in results[kind].message, (kind, results[kind].message)


# ------------------------------------------------------------------------------------------------------
# legitimate kernels: never flagged (a false reject is a failure too)
# ------------------------------------------------------------------------------------------------------


def test_every_legit_kernel_has_a_problem():
    assert sorted(p.stem for p in LEGIT.glob("*.py")) == sorted(LEGIT_PROBLEMS)
    assert len(LEGIT_PROBLEMS) >= 10


@pytest.mark.parametrize("kind", sorted(LEGIT_PROBLEMS))
def test_legit_kernel_is_correct(triton_pool, problems, kind):
    source = (LEGIT / f"{kind}.py").read_text()
    assert check_source(source) == []
    replaced_before = triton_pool.replaced
    result = run_one(triton_pool, problems[LEGIT_PROBLEMS[kind]], source)
    assert result.status is Status.CORRECT, result.message
    assert result.message == "" and result.launches >= CONFIG.trials
    assert triton_pool.replaced == replaced_before  # nothing it did looked like tampering


# ------------------------------------------------------------------------------------------------------
# Reach into the evaluator's state: a library's importer, an aliased module, a function's live defaults
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, expected",
    [
        # `import sys as _s; _s.modules[...]`: the attribute rules read a path through the names bound to it
        ("sys_alias_guard_depth", "`sys.modules` reaches into PyTorch or Python internals"),
        # kzcore's plugin manager, a Language class flag, the tamper watch's records and the worker's frames, each
        # reached through `torch.package.sys_importer.import_module` (any module by a string, around the imports)
        ("plugin_reference_echo", "`torch.package` reaches into PyTorch or Python internals"),
        ("language_flag_guard_off", "`torch.package.sys_importer.import_module` reaches into PyTorch or Python"),
        ("clear_watch_records", "`torch.package.sys_importer` reaches into PyTorch or Python internals"),
        ("forged_result_pipe", "`torch.package.sys_importer` reaches into PyTorch or Python internals"),
        # the launch wrapper's `__kwdefaults__` (where it once kept the function it calls)
        ("kwdefaults_launch", "`softmax_kernel.run.__kwdefaults__` reaches into Python internals"),
    ],
)
def test_reach_by_a_library_importer_an_alias_or_live_defaults_fails_the_static_check(kind, expected):
    problems = check_source(source_of(kind))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import sys as s\nm = s\nx = m.modules\n", "`sys.modules`"),
        ("from torch import package as p\nh = p.sys_importer\n", "`torch.package"),
        ("import torch\nloader = torch.hub\n", "`torch.hub`"),
        ("import torch\nimport triton\nm = triton.knobs.import_module('gc')\n", "import_module"),
        ("import torch\ndef f(g):\n    return g.__defaults__\n", "__defaults__"),
        ("import torch\nx = torch\nx = x.nn\n", None),  # a self-referencing alias ends (and is harmless)
        # the ninth red team's routes: runners of source strings and resolvers by name in the standard library
        ("import torch\nimport doctest\n", "importing `doctest`"),
        ("import torch\nimport timeit\n", "importing `timeit`"),
        ("import torch\nimport cProfile\n", "importing `cProfile`"),
        ("import torch\nt = torch.utils.benchmark.Timer\n", "`torch.utils.benchmark"),
        ("import torch\nb = len.__self__\n", "`len.__self__`"),
        ("import torch\nimport math\ng = math.__import__('gc')\n", "`math.__import__`"),
        ("import torch\nclass Later:\n    def __del__(self):\n        pass\n", "defines `__del__`"),
        # an attribute set on what a call returned at the top level (a module a helper fetched)
        ("import torch\n_g = torch.nn.Module()\n_g._depth = 1\n", "an attribute of an object the module did not"),
        # torch's package of layer classes and nn.Module.modules() are not the module table
        ("import torch\nfrom torch import nn\nn = nn.modules.activation.ReLU.__name__\n", None),
    ],
)
def test_the_attribute_rules_follow_aliases_and_refuse_importers_by_name(source, expected):
    problems = check_source(source + "\nclass ModelNew(torch.nn.Module):\n    pass\n")
    fragment = ("no `@triton.jit` kernel defined", "`ModelNew` has no `forward` method")  # the module is a fragment
    reach = [p for p in problems if p not in fragment]
    if expected is None:
        assert not reach, reach
    else:
        assert any(expected in p for p in reach), problems


def test_watch_reports_a_plugin_registered_in_the_evaluators_plugin_manager():
    from kzcore import hookimpl

    pm = new_plugin_manager(load_entry_points=False, extra=["kz_triton"])
    watch = integrity.Watch(pm=pm)
    assert watch.findings() == []

    class ReferenceEcho:  # what plugin_reference_echo.py registers: the reference answers with the candidate's output
        @hookimpl(tryfirst=True)
        def kz_run_forward(self, language, model, inputs):
            return None

    pm.register(ReferenceEcho())
    found = watch.findings()
    assert len(found) == 1 and "changed the plugin manager's `(plugins)`, `kz_run_forward`" in found[0], found
    # an implementation moved within a hook's list, with no plugin registered, is a change too
    watch = integrity.Watch(pm=pm)
    caller = pm.hook.kz_check_outputs
    impls = caller._hookimpls
    impls.insert(0, impls.pop())
    try:
        assert any("`kz_check_outputs`" in f for f in watch.findings())
    finally:
        impls.append(impls.pop(0))


def test_watch_reports_a_class_flag_of_the_evaluator_set_from_outside(monkeypatch):
    from kzcore.language import Language

    watch = integrity.Watch()
    monkeypatch.setattr(Language, "guard_torch_ops", False)  # what language_flag_guard_off.py does
    assert watch.findings() == [
        "replaced `kzcore.language.Language.guard_torch_ops` (monkey-patching the evaluator, timers or torch)"
    ]


def test_watch_reports_a_function_whose_code_was_swapped():
    """A swapped ``__code__`` keeps the function object, so its binding is unchanged (what the ninth red team did
    to the output check, through a string `timeit` ran): the watch compares each function's code too."""
    from kzcore.evaluate import checking

    watch = integrity.Watch()
    original = checking.check_outputs.__code__
    checking.check_outputs.__code__ = original.replace(co_name="passes_everything")
    try:
        (found,) = watch.findings()  # every module that binds the function names it (problem_check imports it)
        assert found.startswith("replaced `kzcore.evaluate.checking.check_outputs (its code or defaults)`"), found
    finally:
        checking.check_outputs.__code__ = original
    assert watch.findings() == []


def test_watch_reports_its_own_records_emptied(monkeypatch):
    watch = integrity.Watch()
    monkeypatch.setattr(integrity, "_watched", {})  # a record set swapped for an empty one
    assert "emptied or replaced the tamper watch's own records" in watch.findings()
    monkeypatch.undo()
    watch = integrity.Watch()
    saved = dict(integrity._watched)
    integrity._watched.clear()  # emptied in place, as clear_watch_records.py does
    try:
        assert "emptied or replaced the tamper watch's own records" in watch.findings()
    finally:
        integrity._watched.update(saved)
    assert watch.findings() == []


def test_the_launch_wrapper_keeps_what_it_calls_out_of_reach(tmp_path, monkeypatch):
    """kz_triton's counting wrapper holds the kernel's own launch in a closure: no live ``__kwdefaults__`` to
    swap (kwdefaults_launch.py), and an interpreted launch accepts only a real bound method of the kernel."""
    from kz_triton import runtime
    from kzcore.language import import_module_from_file

    path = tmp_path / "kz_candidate_launch.py"
    path.write_text(source_of("kwdefaults_launch"))
    module = import_module_from_file(path, "kz_candidate_launch")
    runtime.instrument(module)
    run = module.softmax_kernel.run
    assert run.__kwdefaults__ is None and run.__defaults__ is None

    class Impostor:  # carries the two attributes a duck-typed check would have read
        __func__ = staticmethod(type(module.softmax_kernel).run)
        __self__ = module.softmax_kernel

    # the launch check bounds the interpreter's memory functions for the process: put them back afterwards, so
    # that later in-process interpreted kernels of this test session (bench's direct timings) run unbounded
    from triton.runtime import interpreter

    monkeypatch.setattr(interpreter, "_interpreter", interpreter._interpreter)
    runtime._interpreter_snapshot.cache_clear()
    launch = runtime._Launch(module, module.softmax_kernel, Impostor(), set())
    try:
        with pytest.raises(runtime.LaunchRefused, match="launch method was replaced"):
            launch.verify()
    finally:
        runtime._interpreter_snapshot.cache_clear()


@pytest.mark.parametrize(
    "kind, problem, status, message",
    [
        # fp32 on an instance's first call, bf16 from its second: the varied trial 1 is judged by the precision bar
        ("bf16_after_first_call", "8_MeanReduction", Status.INCORRECT, "trial 1"),
        # honest in the trials, then a 3/4 row subsample of a 0-d loss: its timed pairs compare the whole output
        ("subsample_after_trials", "94_MSELoss", Status.HACK_SUSPECTED, "it computes below the problem's precision"),
    ],
)
def test_precision_or_work_cut_after_the_first_trial_is_refused(triton_pool, problems, kind, problem, status, message):
    if problem not in problems:
        pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
        problems = {p.name: p for p in load_problems("kernelbench:1", pm=pm)}
    result = run_one(triton_pool, problems[problem], source_of(kind))
    assert result.status is status, result.message
    assert message in result.message
    assert "precision" in result.message
