"""kz_cuda, the CUDA language (dialect `cuda`): NVRTC compilation and its errors, the compile cache, kernel
signature parsing and launch-argument checking, the static check, loading candidates, the built-in reference
solutions and the prompt. NVRTC runs without a GPU, so all of that is tested here on CPU; what needs a GPU
(launching, the runtime verdicts) is marked `gpu` and runs only on a GPU machine."""

from __future__ import annotations

import importlib.metadata
import re
import struct

import pytest

from kz_cuda import f32, i32, i64, load_kernels, u64
from kz_cuda.compile import clear_cache, compile_cuda
from kz_cuda.launch import GPURequiredError, Kernel
from kz_cuda.runtime import kernel_strings, load_module
from kz_cuda.signature import check_args, launch_dims, parse_kernels
from kz_cuda.static import check_source
from kz_suites import BUILTIN_SUITE
from kzcore import PROJECT
from kzcore.errors import CompileError
from kzcore.evaluate.runner import evaluate
from kzcore.problems import apply_size_profile, import_module_from_file, load_problems, load_solutions
from kzcore.types import Candidate, EvalConfig, Status

SOLUTIONS = BUILTIN_SUITE / "solutions" / "cuda"
BUILTIN_SOLUTIONS = sorted(SOLUTIONS.glob("level*/*.py"))
EM_CUDA = 190  # ELF e_machine of a CUDA cubin

RELU_SOURCE = """extern "C" __global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.0f);
}
"""

CANDIDATE = '''import torch
from torch import nn

from kz_cuda import i32, load_kernels

SOURCE = r"""
extern "C" __global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.0f);
}
"""

relu_kernel = load_kernels(SOURCE)["relu_kernel"]


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        #EXTRA
        relu_kernel(grid=((n + 255) // 256,), block=(256,), args=(x, out, #N))
        return out
'''


@pytest.fixture(autouse=True)
def restore_execution_device(monkeypatch):
    """Loading a candidate on "cpu" pins this process to compile-only; undo that after each test."""
    from kz_cuda import launch

    monkeypatch.setitem(launch._execution, "device", launch._execution["device"])


def candidate(extra: str = "", n: str = "i32(n)", kernel_line: str | None = None) -> str:
    source = CANDIDATE.replace("#EXTRA", extra or "pass").replace("#N", n)
    if kernel_line is not None:
        source = source.replace("    if (i < n) out[i] = fmaxf(x[i], 0.0f);", kernel_line)
    return source


def line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


# ------------------------------------------------------------------------------------------------------
# plugin and NVRTC
# ------------------------------------------------------------------------------------------------------


def test_plugin_is_installed():
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=PROJECT)}
    assert "cuda" in eps, f"kz_cuda is not installed with a {PROJECT!r} entry point"
    assert eps["cuda"].value == "kz_cuda"
    plugin = eps["cuda"].load()
    assert hasattr(plugin.kz_register_languages, f"{PROJECT}_impl")


def test_language_is_registered_as_needing_a_gpu(plugins):
    from kzcore.plugins import languages

    lang = languages(plugins("kz_cuda")).items["cuda"]
    assert lang.needs_gpu and lang.guard_torch_ops and "cuda" in lang.fence_tags


def test_nvrtc_compiles_a_kernel_to_an_sm90_cubin_without_a_gpu():
    clear_cache()
    module = compile_cuda(RELU_SOURCE, arch="sm_90")
    assert module.cubin[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", module.cubin, 18)[0] == EM_CUDA
    assert b"relu_kernel" in module.cubin  # extern "C": the symbol is the plain name


def test_a_compile_leaves_the_interpreters_shared_bytes_intact(tmp_path):
    """NVRTC fills the buffers it is handed: handed the interpreter's shared one-byte object (a clean log is
    one NUL byte), it rewrote b" " for the whole process, and torch.save then wrote checkpoints that could not
    be loaded (the evaluator's main process builds CUDA candidates ahead of time, so this reached training)."""
    import torch

    clear_cache()
    compile_cuda(RELU_SOURCE.replace("relu_kernel", "relu_kernel_shared_bytes"), arch="sm_90")
    assert b" " * 1 == bytes([32]) and (b" " * 1)[0] == 32
    state = {i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(32)} for i in range(4)}
    torch.save(state, tmp_path / "state.pt")
    loaded = torch.load(tmp_path / "state.pt", weights_only=True)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[i]["exp_avg"], state[i]["exp_avg"]) for i in state)


def test_name_expressions_give_lowered_names():
    source = "template <int B> __global__ void scale(float* x) { x[threadIdx.x] *= B; }\n"
    module = compile_cuda(source, name_expressions=["scale<4>"])
    assert module.lowered_names["scale<4>"].startswith("_Z")


def test_syntax_error_is_a_compile_error_naming_its_line():
    source = RELU_SOURCE.replace("fmaxf(x[i], 0.0f);", "fmaxf(x[i], 0.0f)\n    out[0] = 1.0f;")
    with pytest.raises(CompileError) as info:
        compile_cuda(source, label="SOURCE")
    log = info.value.log
    assert log.startswith("NVRTC could not compile the CUDA source `SOURCE` for sm_90")
    assert re.search(r"^line 4: error: expected a \";\"\n      out\[0\] = 1.0f;\n      \^$", log, re.M), log
    # the same error reported against the candidate module's lines when the string starts at line 10
    with pytest.raises(CompileError) as info:
        compile_cuda(source, label="SOURCE", first_line=10, line_origin="line numbers are lines of your module")
    assert re.search(r"^line 13: error", info.value.log, re.M)
    assert "(line numbers are lines of your module)" in info.value.log


def test_every_error_is_reported_with_its_own_line():
    source = RELU_SOURCE.replace("threadIdx.x;", "threadIdx.x + bogus_a;").replace("0.0f);", "bogus_b);")
    with pytest.raises(CompileError) as info:
        compile_cuda(source)
    assert re.search(r'^line 2: error: identifier "bogus_a" is undefined', info.value.log, re.M), info.value.log
    assert re.search(r'^line 3: error: identifier "bogus_b" is undefined', info.value.log, re.M), info.value.log


def test_an_include_gets_the_no_headers_hint():
    with pytest.raises(CompileError) as info:
        compile_cuda("#include <cuda_fp16.h>\n" + RELU_SOURCE)
    assert "could not open source file" in info.value.log
    assert "NVRTC sees no headers here" in info.value.log


def test_the_prelude_supplies_common_types_and_limits():
    source = 'extern "C" __global__ void k(int64_t* a, uint8_t* b, float* c) { c[0] = -INFINITY + FLT_MAX; }'
    assert compile_cuda(source).cubin[:4] == b"\x7fELF"


def test_a_second_compile_is_a_cache_hit():
    from kz_cuda.compile import cache_stats

    clear_cache()
    first = compile_cuda(RELU_SOURCE)
    again = compile_cuda(RELU_SOURCE, first_line=40, label="elsewhere")  # where it came from is not in the key
    assert again is first
    assert cache_stats() == {"hits": 1, "misses": 1}
    compile_cuda(RELU_SOURCE, options=["--use_fast_math"])
    compile_cuda(RELU_SOURCE, arch="sm_80")
    assert cache_stats() == {"hits": 1, "misses": 3}


# ------------------------------------------------------------------------------------------------------
# signatures and launch arguments (no GPU: everything before the driver call)
# ------------------------------------------------------------------------------------------------------

SIGNATURES = r"""
// a comment mentioning __global__ void ghost(int n) is not a kernel
extern "C" __global__ void a(const float* __restrict__ x, float* out, int n, unsigned long long m, double s) {}
extern "C" {
__global__ __launch_bounds__(256) void b(long long* idx, float4* v, size_t n, float eps) {}
}
template <int B> __global__ void templated(float* x) {}
__global__ void cpp_linkage(float* x) {}
extern "C" __global__ void c(void) {}
"""


def test_parse_kernels_reads_extern_c_signatures():
    sigs = parse_kernels(SIGNATURES)
    assert set(sigs) == {"a", "b", "cpp_linkage", "c"}
    assert [(p.name, p.kind) for p in sigs["a"].params] == [
        ("x", "pointer"),
        ("out", "pointer"),
        ("n", "i32"),
        ("m", "u64"),
        ("s", "f64"),
    ]
    assert sigs["a"].params[0].dtypes == ("float32",)
    assert [p.kind for p in sigs["b"].params] == ["pointer", "pointer", "u64", "f32"]
    assert sigs["b"].params[0].dtypes == ("int64",)
    assert sigs["b"].extern_c and sigs["b"].line == 5
    assert not sigs["cpp_linkage"].extern_c
    assert sigs["c"].params == ()


def test_load_kernels_exposes_only_extern_c_kernels():
    kernels = load_kernels(SIGNATURES)
    assert sorted(kernels) == ["a", "b", "c"]
    with pytest.raises(KeyError, match='`cpp_linkage` is not declared extern "C"'):
        kernels["cpp_linkage"]


def _relu() -> Kernel:
    return load_kernels(RELU_SOURCE)["relu_kernel"]


def test_arguments_matching_the_signature_pass():
    import torch

    check_args(_relu().signature, (torch.ones(4), torch.empty(4), i32(4)))


@pytest.mark.parametrize(
    "args, message",
    [
        (("x", "out", 4), r"argument 2 \(`int n`\) got a bare Python int: wrap it as kz_cuda.i32"),
        (("x", "out", 4.0), r"argument 2 \(`int n`\) got a bare Python float"),
        (("x", "out", i64(4)), r"argument 2 \(`int n`\) takes kz_cuda.i32\(...\), got i64\(4\)"),
        (("x", "out"), r"relu_kernel takes 3 argument\(s\) \(relu_kernel\(const float\* __restrict__ x, .*\), got 2"),
        (("x", "out", i32(4), i32(4)), r"takes 3 argument\(s\).*got 4"),
        (("x", "x64", i32(4)), r"argument 1 \(`float\* __restrict__ out`\): got a tensor of float64"),
        (("x", 0, i32(4)), r"argument 1 .* is a pointer: pass a torch tensor, got int"),
    ],
)
def test_bad_arguments_are_refused_before_launch(args, message):
    import torch

    tensors = {"x": torch.ones(4), "out": torch.empty(4), "x64": torch.empty(4, dtype=torch.float64)}
    args = tuple(tensors.get(a, a) if isinstance(a, str) else a for a in args)
    with pytest.raises(TypeError, match=message):
        check_args(_relu().signature, args)


def test_scalar_wrappers_check_their_range_and_type():
    assert i32(2**31 - 1).value == 2**31 - 1 and u64(2**64 - 1).value == 2**64 - 1
    with pytest.raises(OverflowError, match="out of range"):
        i32(2**31)
    with pytest.raises(TypeError, match="takes an integer"):
        i32(1.5)
    with pytest.raises(TypeError, match="takes a number"):
        f32("1.0")
    assert f32(1).as_ctype().value == 1.0


def test_launch_configuration_is_checked():
    assert launch_dims(8, (16, 16), 0) == ((8, 1, 1), (16, 16, 1), 0)
    with pytest.raises(ValueError, match="at most 1024 threads"):
        launch_dims((1,), (2048,), 0)
    with pytest.raises(ValueError, match=">= 1"):
        launch_dims((0,), (256,), 0)
    with pytest.raises(TypeError, match="tuple of 1 to 3 ints"):
        launch_dims((1, 1, 1, 1), (256,), 0)
    with pytest.raises(ValueError, match="shared_mem"):
        launch_dims((1,), (256,), -1)


def test_launching_where_kernels_cannot_run_says_it_compiled(monkeypatch):
    import torch

    from kz_cuda import launch

    monkeypatch.setitem(launch._execution, "device", "cpu")
    kernel = _relu()
    with pytest.raises(TypeError, match="bare Python int"):  # argument errors still come first
        kernel(grid=(1,), block=(256,), args=(torch.ones(4), torch.empty(4), 4))
    with pytest.raises(GPURequiredError, match="CUDA candidates need a GPU; compiled OK with NVRTC for sm_90"):
        kernel(grid=(1,), block=(256,), args=(torch.ones(4), torch.empty(4), i32(4)))
    assert launch.launches_of(__name__) == 0


# ------------------------------------------------------------------------------------------------------
# static check
# ------------------------------------------------------------------------------------------------------


def test_static_check_passes_a_good_candidate():
    assert check_source(candidate()) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        (candidate("out = torch.matmul(x, x)"), "calls `torch.matmul` (PyTorch compute)"),
        (candidate("out = x.softmax(-1)"), "calls tensor method `.softmax()`"),
        (candidate("out = x @ x"), "`@` (matrix multiply)"),
        (candidate().replace("__global__ ", ""), "no CUDA kernel source"),
        (candidate().replace('extern "C" ', ""), 'no kernel is declared extern "C"'),
        (candidate().replace("class ModelNew", "class Other"), "no `class ModelNew` defined"),
        (candidate().replace("import torch\n", "import torch\nimport cupy\n"), "importing `cupy` is not allowed"),
        (
            candidate().replace("import torch\n", "import torch\nfrom torch.utils.cpp_extension import load_inline\n"),
            "load_inline",
        ),
        (candidate().replace("import torch\n", "import torch\nfrom kz_cuda.launch import _launches\n"), "internals"),
        (candidate("kz_cuda.launch._launches.clear()"), "reaches into"),
        (candidate("import triton"), "importing `triton` is not allowed"),
    ],
)
def test_static_check_violations(source, expected):
    problems = check_source(source)
    assert any(expected in p for p in problems), problems


def test_static_check_flags_try_except_with_its_line():
    source = candidate("try:\n            pass\n        except Exception:\n            pass")
    problems = check_source(source)
    assert f"line {line_of(source, 'try:')}: try/except is not allowed (no fallback paths)" in problems


# ------------------------------------------------------------------------------------------------------
# loading candidates
# ------------------------------------------------------------------------------------------------------


def test_kernel_strings_map_to_module_lines():
    source = candidate()
    (ks,) = kernel_strings(source)
    assert ks.label == "SOURCE" and ks.mapped
    assert ks.first_line == line_of(source, 'SOURCE = r"""')


def test_load_reports_a_cuda_syntax_error_at_its_module_line(tmp_path):
    source = candidate(kernel_line="    if (i < n) out[i] = fmaxf(x[i], 0.0f)\n    bogus;")
    path = tmp_path / "kz_cand_syntax.py"
    path.write_text(source)
    with pytest.raises(CompileError) as info:
        load_module(path, "cpu")
    assert f"line {line_of(source, 'bogus;')}: error" in info.value.log
    assert "lines of your Python module" in info.value.log


def test_load_compiles_kernel_strings_built_at_import(tmp_path):
    # the literal compiles; the string the module builds from it at import does not
    source = candidate().replace(
        "relu_kernel = load_kernels", "BROKEN = SOURCE.replace('0.0f);', '0.0f)')\nrelu_kernel = load_kernels"
    )
    path = tmp_path / "kz_cand_built.py"
    path.write_text(source)
    with pytest.raises(CompileError, match="`BROKEN`") as info:
        load_module(path, "cpu")
    assert "lines counted within BROKEN" in info.value.log


def test_load_kernels_records_the_calling_module(tmp_path):
    path = tmp_path / "kz_cand_owner.py"
    path.write_text(candidate())
    module = load_module(path, "cpu")
    assert module.relu_kernel.owner == "kz_cand_owner"


def test_worker_warm_up_compiles_and_a_failure_does_not_stop_the_worker(monkeypatch, capsys):
    from kz_cuda import runtime
    from kz_cuda.compile import cache_stats

    clear_cache()
    runtime.warm_up("cpu")
    assert cache_stats()["misses"] == 1

    def broken(*args, **kwargs):
        raise RuntimeError("libnvrtc not found")

    monkeypatch.setattr(runtime, "compile_cuda", broken)
    runtime.warm_up("cpu")
    assert "kz_cuda: warm-up on cpu failed: RuntimeError: libnvrtc not found" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------------
# through the evaluator on CPU (real spawned worker)
# ------------------------------------------------------------------------------------------------------


def test_evaluator_on_cpu_files_compile_errors_and_refuses_to_run(plugins, tmp_path, own_workers, native_build):
    pm = plugins("kz_cuda")
    problems = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    broken = candidate(kernel_line="    if (i < n) out[i] = fmaxf(x[i], 0.0f)")
    sources = {
        0: broken,
        1: candidate(),
        2: candidate("out = torch.matmul(x, x)"),
        3: candidate(n="n"),
    }
    cands = [Candidate(problem="1_ReLU", language="cuda", level=1, sample=s, source=src) for s, src in sources.items()]
    config = EvalConfig(device="cpu", trials=1, timeout_s=60)
    results = {r.sample: r for r in evaluate(problems, cands, config, tmp_path / "r.jsonl", workers=1, pm=pm)}
    assert results[0].status is Status.COMPILE_ERROR
    assert results[0].message.startswith("NVRTC could not compile the CUDA source `SOURCE` for sm_90")
    assert f'line {line_of(broken, "fmaxf") + 1}: error: expected a ";"' in results[0].message
    assert results[1].status is Status.RUNTIME_ERROR
    assert "CUDA candidates need a GPU; compiled OK with NVRTC for sm_90" in results[1].message
    assert results[1].stages["compile"] > 0
    assert results[2].status is Status.STATIC_CHECK_FAILED and "torch.matmul" in results[2].message
    assert results[3].status is Status.RUNTIME_ERROR and "bare Python int" in results[3].message


# ------------------------------------------------------------------------------------------------------
# reference solutions and prompt
# ------------------------------------------------------------------------------------------------------


def test_reference_solutions_cover_the_issue_minimum():
    levels = [p.parent.name for p in BUILTIN_SOLUTIONS]
    assert levels.count("level1") >= 12 and levels.count("level2") >= 4


@pytest.mark.parametrize("path", BUILTIN_SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_reference_solution_passes_static_check_and_compiles_for_sm90(path, tmp_path):
    import torch

    source = path.read_text()
    assert check_source(source) == []
    copy = tmp_path / f"kz_solution_{path.parent.name}_{path.stem}.py"
    copy.write_text(source)
    module = load_module(copy, "cpu")  # every kernel string compiled with NVRTC for sm_90
    problem = import_module_from_file(BUILTIN_SUITE / path.parent.name / path.name, "kz_prob")
    apply_size_profile(problem, "small")
    init = problem.get_init_inputs()
    torch.manual_seed(0)
    reference = problem.Model(*init)
    torch.manual_seed(0)
    new = module.ModelNew(*init)
    ref_params, new_params = list(reference.parameters()), list(new.parameters())
    assert [p.shape for p in ref_params] == [p.shape for p in new_params]
    assert all(torch.equal(a, b) for a, b in zip(ref_params, new_params)), "parameters differ from Model's"


def test_prompt_sections_document_the_launcher_in_at_most_25_lines(plugins):
    from kz_cuda.prompt import EXAMPLE, LAUNCHER_API

    pm = plugins("kz_cuda")
    (problem,) = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    sections = [s for group in pm.hook.kz_prompt_sections(language="cuda", problem=problem, template="") for s in group]
    titles = {s.title for s in sections}
    assert {"CUDA rules", "Launcher API (kz_cuda)", "Example"} <= titles
    assert len(LAUNCHER_API.splitlines()) <= 25
    answer = EXAMPLE.split("a correct answer is:\n```python\n")[1].split("```")[0]
    assert check_source(answer) == []
    assert kernel_strings(answer) and compile_cuda(kernel_strings(answer)[0].text).cubin[:4] == b"\x7fELF"


def test_builtin_cuda_solutions_load_through_the_suite(plugins):
    pm = plugins("kz_cuda")
    problems = load_problems("builtin", pm=pm)
    solutions = load_solutions("builtin", problems, "cuda", pm=pm)
    assert len(solutions) == len(BUILTIN_SOLUTIONS)
    assert {c.language for c in solutions} == {"cuda"}


# ------------------------------------------------------------------------------------------------------
# GPU only: launching, runtime verdicts (not run on CPU machines)
# ------------------------------------------------------------------------------------------------------

GPU_CONFIG = EvalConfig(device="cuda", trials=3, reps=10, max_timing_s=2.0, timeout_s=120)


@pytest.mark.gpu
def test_launch_runs_on_torchs_stream_and_counts():
    import torch

    from kz_cuda import launch

    x = torch.randn(10_000, device="cuda")
    out = torch.empty_like(x)
    before = launch.launches_of(__name__)
    _relu()(grid=((x.numel() + 255) // 256,), block=(256,), args=(x, out, i32(x.numel())))
    torch.cuda.synchronize()
    assert torch.equal(out, torch.relu(x))
    assert launch.launches_of(__name__) == before + 1
    with pytest.raises(ValueError, match="a tensor on cpu"):
        _relu()(grid=(1,), block=(256,), args=(x.cpu(), out, i32(4)))


@pytest.mark.gpu
def test_large_dynamic_shared_memory_opts_in():
    import torch

    source = r"""extern "C" __global__ void rev(const float* x, float* out, int n) {
        extern __shared__ float buf[];
        for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
    }"""
    n = 20_000  # 80 KB of shared memory: above the 48 KB default
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    load_kernels(source)["rev"](grid=(1,), block=(1024,), args=(x, out, i32(n)), shared_mem=4 * n)
    torch.cuda.synchronize()
    assert torch.equal(out, x.flip(0))


@pytest.mark.gpu
def test_reference_solutions_are_correct_on_the_gpu(plugins, tmp_path):
    pm = plugins("kz_cuda")
    problems = load_problems("builtin", pm=pm)
    solutions = load_solutions("builtin", problems, "cuda", pm=pm)
    results = evaluate(problems, solutions, GPU_CONFIG, tmp_path / "r.jsonl", pm=pm)
    assert len(results) == len(BUILTIN_SOLUTIONS)
    wrong = {r.problem: f"{r.status.value}: {r.message}" for r in results if r.status is not Status.CORRECT}
    assert not wrong, wrong
    assert all(r.launches >= 1 and r.size == "full" for r in results)


@pytest.mark.gpu
def test_runtime_verdicts_on_the_gpu(plugins, tmp_path):
    pm = plugins("kz_cuda")
    problems = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    hidden_matmul = candidate("y = op(x[:2, :2], x[:2, :2])").replace(
        "class ModelNew", "op = torch.matmul\n\n\nclass ModelNew"
    )
    never_launched = candidate().replace(
        "        relu_kernel(grid=((n + 255) // 256,), block=(256,), args=(x, out, i32(n)))\n", ""
    )
    oob = candidate(kernel_line="    if (i < n) out[i + (1ll << 40)] = x[i];")
    cut_off = candidate().split("        relu_kernel(grid=")[0]  # a completion cut at its token limit: no return
    sources = {0: hidden_matmul, 1: never_launched, 2: oob, 3: candidate(), 4: candidate("out = torch.matmul(x, x)")}
    sources[5] = cut_off
    cands = [Candidate(problem="1_ReLU", language="cuda", level=1, sample=s, source=src) for s, src in sources.items()]
    results = {r.sample: r for r in evaluate(problems, cands, GPU_CONFIG, tmp_path / "r.jsonl", workers=1, pm=pm)}
    assert results[0].status is Status.HACK_SUSPECTED and "aten.mm" in results[0].message, results[0].message
    assert results[1].status is Status.HACK_SUSPECTED, results[1].message
    assert "launched none of the candidate's own cuda kernels" in results[1].message
    assert results[2].status is Status.RUNTIME_ERROR, results[2].message
    assert results[3].status is Status.CORRECT, results[3].message  # the pool replaced the poisoned worker
    assert results[4].status is Status.STATIC_CHECK_FAILED
    assert results[5].status is Status.INCORRECT and results[5].launches == 0, results[5].message  # not a cheat
