"""kz_cuda's second dialect, `cuda-inline`: KernelBench's load_inline modules run unchanged, built into a
disk cache keyed by sources + flags + toolchain + architecture, prebuilt on CPU processes ahead of
evaluation, with build errors trimmed and mapped to the candidate's lines; its static check and prompt.

CI has g++ but no nvcc and a CPU build of torch, which cannot build CUDA extensions at all. So the builds
here are C++-only load_inline extensions compiled by g++ (two of them, shared by a module fixture, ~20-40 s);
nvcc's own diagnostics are checked by running nvcc directly (skipped when it is missing); building and
running the CUDA solutions is the `gpu` tests' job."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kz_cuda import inline
from kz_cuda.inline import bind_arguments, build_key, can_build_cuda, load_module
from kz_cuda.inline_log import source_map, trim_build_log
from kz_cuda.inline_static import check_source
from kz_cuda.launch import GPURequiredError
from kz_cuda.prebuild import BuildStatus, prebuild, prepare
from kz_suites import BUILTIN_SUITE
from kzcore.cache import cache_dir
from kzcore.errors import CompileError
from kzcore.evaluate.runner import evaluate
from kzcore.problems import apply_size_profile, import_module_from_file, load_problems, load_solutions
from kzcore.types import Candidate, EvalConfig, Status

SUITE = BUILTIN_SUITE
SOLUTIONS = sorted((SUITE / "solutions" / "cuda-inline").glob("level*/*.py"))
RELU_SOLUTION = SUITE / "solutions" / "cuda-inline" / "level1" / "1_ReLU.py"

# A load_inline module without CUDA (g++ builds it on any machine); its forward runs on CPU tensors.
CPP_ONLY = '''import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor add_one(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) dst[i] = src[i] + 1.0f;
    return out;
}
"""

ext = load_inline(
    name="add_one_ext",
    cpp_sources=cpp_source,
    functions=["add_one"],
    verbose=False,
    extra_cflags=["-Wall"],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.add_one(x)
'''
# Two errors (a missing semicolon, an undeclared name) and a -Wall warning that must not be reported.
CPP_BROKEN = CPP_ONLY.replace("    return out;\n", "    int unused_variable = 0;\n    return out\n").replace(
    "src[i] + 1.0f", "src[i] + undeclared_offset"
)


def line_of(source: str, needle: str) -> int:
    return next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)


def write(tmp_path: Path, source: str, stem: str = "kz_inline_candidate") -> Path:
    path = tmp_path / f"{stem}.py"
    path.write_text(source)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, native_build):
    """Prebuild the good and the broken C++ module (the good one listed twice) into a fresh cache with two
    parallel build processes; the cache stays this module's KZ_CACHE."""
    cache = tmp_path_factory.mktemp("kz-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KZ_CACHE", str(cache))
        t0 = time.perf_counter()
        outcomes = prebuild([CPP_ONLY, CPP_BROKEN, CPP_ONLY], workers=2, archs=["9.0"])
        wall = time.perf_counter() - t0
        yield {"cache": cache / "cuda-inline", "outcomes": outcomes, "wall": wall}


@pytest.fixture
def cpu_torch():
    if can_build_cuda():
        pytest.skip("this torch builds CUDA extensions: the gpu tests cover building and running them")


# ------------------------------------------------------------------------------------------------------
# plugin, cache location, cache key
# ------------------------------------------------------------------------------------------------------


def test_cuda_inline_is_registered_as_a_second_language(plugins):
    from kzcore.plugins import languages

    langs = languages(plugins("kz_cuda")).items
    assert {"cuda", "cuda-inline"} <= set(langs)
    assert langs["cuda-inline"].needs_gpu and langs["cuda-inline"].guard_torch_ops


def test_cache_dir_follows_kz_cache_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "kz"))
    assert cache_dir("cuda-inline") == tmp_path / "kz" / "cuda-inline" and (tmp_path / "kz" / "cuda-inline").is_dir()
    monkeypatch.delenv("KZ_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("cuda-inline") == tmp_path / "xdg" / "kzcore" / "cuda-inline"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("x") == tmp_path / "home" / ".cache" / "kzcore" / "x"


def test_cache_key_covers_sources_flags_functions_toolchain_and_arch(monkeypatch):
    call = dict(name="a", cpp_sources="int f();", cuda_sources="__global__ void k() {}", functions=["f"])
    key = build_key(bind_arguments((), call), "9.0")
    # same sources and flags: same key, whatever the extension is called, where or how loudly it builds
    renamed = dict(call, name="b", verbose=True, build_directory="/elsewhere")
    assert build_key(bind_arguments((), renamed), "9.0") == key
    assert (
        build_key(bind_arguments(("a", "int f();"), {k: call[k] for k in ("cuda_sources", "functions")}), "9.0") == key
    )
    assert build_key(bind_arguments((), dict(call, cpp_sources=["int f();"])), "9.0") == key
    different = [
        dict(call, extra_cflags=["-O3"]),
        dict(call, extra_cuda_cflags=["--use_fast_math"]),
        dict(call, extra_ldflags=["-lm"]),
        dict(call, functions=["f", "g"]),
        dict(call, cuda_sources="__global__ void k() { }"),
        dict(call, cpp_sources="int f(); "),
    ]
    keys = {build_key(bind_arguments((), c), "9.0") for c in different}
    assert len(keys) == len(different) and key not in keys
    assert build_key(bind_arguments((), call), "8.0") != key
    real = inline.toolchain()
    monkeypatch.setattr(inline, "toolchain", lambda: dict(real, nvcc="Cuda compilation tools, release 99.9"))
    assert build_key(bind_arguments((), call), "9.0") != key


def test_toolchain_names_torch_the_compilers_and_the_python_abi():
    import torch

    chain = inline.toolchain()
    assert chain["torch"] == torch.__version__
    assert set(chain) == {"torch", "torch_cuda", "nvcc", "cxx", "python_abi"}
    assert chain["cxx"] != "none" and chain["python_abi"].endswith(".so")
    if shutil.which("nvcc"):
        assert "release" in chain["nvcc"]


# ------------------------------------------------------------------------------------------------------
# builds: prebuild in parallel processes, the disk cache, errors
# ------------------------------------------------------------------------------------------------------


def test_prebuild_builds_candidates_in_parallel_processes(built):
    good, broken, again = built["outcomes"]
    assert good.status is BuildStatus.BUILT, good.log
    assert broken.status is BuildStatus.COMPILE_ERROR
    assert again == good  # an identical source is built once
    (key,) = good.keys
    entry = built["cache"] / key
    assert (entry / f"kz_inline_{key}.so").is_file() and (entry / inline.OK_MARKER).is_file()
    assert (built["cache"] / broken.keys[0] / inline.ERROR_MARKER).is_file()
    # the two builds overlapped: the whole prebuild took less than the two build processes one after the other
    assert built["wall"] < 0.9 * (good.seconds + broken.seconds), (built["wall"], good.seconds, broken.seconds)


def test_compile_errors_are_trimmed_to_the_errors_on_the_candidates_lines(built):
    log = built["outcomes"][1].log
    assert log.startswith("load_inline could not build the extension (the C++ compiler):")
    semicolon = line_of(CPP_BROKEN, "    return out")
    undeclared = line_of(CPP_BROKEN, "undeclared_offset")
    assert f"line {semicolon} (in cpp_source): error:" in log, log
    assert f"line {undeclared} (in cpp_source): error:" in log and "undeclared_offset" in log, log
    assert len([ln for ln in log.splitlines() if ": error:" in ln]) == 2
    for noise in ("warning", "unused_variable", "ninja", "FAILED", "[1/", "-MMD", "Error building extension"):
        assert noise not in log, (noise, log)
    assert len(log.splitlines()) <= 1 + 2 * 3  # header + two errors with at most two context lines each


def test_second_build_is_a_cache_hit(built, tmp_path):
    import torch

    (key,) = built["outcomes"][0].keys
    library = built["cache"] / key / f"kz_inline_{key}.so"
    mtime = library.stat().st_mtime_ns
    (hit,) = prebuild([CPP_ONLY], workers=1, archs=["9.0"])
    assert hit.status is BuildStatus.CACHED and hit.keys == (key,)
    # a worker loading the same source imports the cached library: no compiler runs, the file is untouched
    inline.take_events()
    t0 = time.perf_counter()
    module = load_module(write(tmp_path, CPP_ONLY, "kz_inline_cache_hit"), "cpu")
    elapsed = time.perf_counter() - t0
    (event,) = inline.take_events()
    assert event["status"] == "cached" and event["key"] == key
    assert library.stat().st_mtime_ns == mtime
    assert elapsed < built["outcomes"][0].seconds / 2
    assert torch.equal(module.ModelNew()(torch.zeros(3)), torch.ones(3))


def test_a_cached_compile_error_is_raised_without_building_again(built, tmp_path, plugins):
    pm = plugins("kz_cuda")
    t0 = time.perf_counter()
    with pytest.raises(CompileError) as info:
        pm.hook.kz_load_candidate(
            language="cuda-inline", path=write(tmp_path, CPP_BROKEN, "kz_inline_broken"), device="cpu"
        )
    assert time.perf_counter() - t0 < 10
    assert info.value.log == built["outcomes"][1].log


def test_nvcc_errors_are_trimmed_and_mapped_to_the_cuda_source(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed on this machine")
    cuda_source = (
        "\n__global__ void scale(float* x, int n) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) x[i] *= undefined_factor;\n"
        "    float y = missing_helper(i);\n}\n"
    )
    module = f'cuda_src = r"""{cuda_source}"""\n'
    # cuda.cu as load_inline lays it out: three include lines, then the string
    (tmp_path / "cuda.cu").write_text("#include <cuda.h>\n#include <cuda_runtime.h>\n// torch/types.h\n" + cuda_source)
    done = subprocess.run(
        ["nvcc", "-c", "cuda.cu", "-o", "cuda.o", "-gencode=arch=compute_90,code=sm_90"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    output = (
        "[1/3] nvcc --generate-dependencies-with-compile cuda.cu\nFAILED: cuda.cuda.o\n" + done.stdout + done.stderr
    )
    text, errors = trim_build_log(output, source_map(["int f();"], [cuda_source], True, module))
    assert errors == 2, output
    assert f"line {line_of(module, 'undefined_factor')} (in cuda_src): error:" in text, text
    assert 'identifier "undefined_factor" is undefined' in text
    assert f"line {line_of(module, 'missing_helper')} (in cuda_src): error:" in text, text
    assert "    if (i < n) x[i] *= undefined_factor;" in text  # nvcc's excerpt of the line comes along
    assert "nvcc" not in text and "FAILED" not in text and "detected in the compilation" not in text


# ------------------------------------------------------------------------------------------------------
# CPU-only machines: KernelBench solutions load, and fail to run with a clear reason
# ------------------------------------------------------------------------------------------------------


def test_kernelbench_solution_loads_on_cpu_and_refuses_to_run(cpu_torch, tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    module = load_module(write(tmp_path, RELU_SOLUTION.read_text(), "kz_inline_relu"), "cpu")
    with pytest.raises(GPURequiredError, match="cannot build CUDA extensions"):
        module.ModelNew()(torch.randn(4))


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_builtin_solutions_pass_the_static_check_and_create_models_parameters(cpu_torch, path, tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    assert check_source(path.read_text()) == []
    module = load_module(write(tmp_path, path.read_text(), f"kz_sol_{path.parent.name}_{path.stem}"), "cpu")
    problem = import_module_from_file(SUITE / path.parent.name / path.name, "kz_inline_prob")
    apply_size_profile(problem, "small")
    init = problem.get_init_inputs()
    torch.manual_seed(0)
    reference = problem.Model(*init)
    torch.manual_seed(0)
    new = module.ModelNew(*init)
    ref_params, new_params = list(reference.parameters()), list(new.parameters())
    assert [p.shape for p in ref_params] == [p.shape for p in new_params]
    assert all(torch.equal(a, b) for a, b in zip(ref_params, new_params))


def test_builtin_solutions_are_found_by_language(plugins):
    pm = plugins("kz_cuda")
    problems = load_problems("builtin", pm=pm)
    solutions = load_solutions("builtin", problems, "cuda-inline", pm=pm)
    assert {(c.level, c.problem) for c in solutions} == {(1, "1_ReLU"), (2, "1_Gemm_BiasAdd_ReLU")}
    assert {c.language for c in solutions} == {"cuda-inline"}


def test_evaluator_verdicts_on_cpu(cpu_torch, plugins, tmp_path, monkeypatch, own_workers):
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    pm = plugins("kz_cuda")
    problems = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    solution = RELU_SOLUTION.read_text()
    cheat = solution.replace("return self.relu.relu_cuda(x)", "return torch.relu(x)")
    cands = [
        Candidate(problem="1_ReLU", language="cuda-inline", level=1, sample=s, source=src)
        for s, src in enumerate([solution, cheat])
    ]
    config = EvalConfig(device="cpu", trials=1, timeout_s=120)
    results = {r.sample: r for r in evaluate(problems, cands, config, tmp_path / "r.jsonl", workers=1, pm=pm)}
    assert results[0].status is Status.RUNTIME_ERROR, results[0].message
    assert "cuda-inline candidates need a GPU" in results[0].message
    assert results[1].status is Status.STATIC_CHECK_FAILED and "torch.relu" in results[1].message


# ------------------------------------------------------------------------------------------------------
# the prepare hook
# ------------------------------------------------------------------------------------------------------


def test_kz_prepare_candidates(plugins, tmp_path, monkeypatch):
    from tests import fakes_hooks

    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))  # the fake executor's problem checks stay here

    pm = plugins("kz_pylang", "tests.fakes_hooks:FAKE_EXECUTORS", "tests.fakes_hooks:PREPARE_RECORDER")
    from tests.fakes_hooks import PREPARE_RECORDER as recorder

    recorder.calls.clear()
    fakes_hooks.InlineExecutor.instances.clear()
    relu = next(p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU")
    code = "import torch\nfrom torch import nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    cands = [
        Candidate(problem="1_ReLU", language="python", level=1, sample=0, source=code),
        Candidate(problem="1_ReLU", language="python", level=1, sample=1, completion=f"here:\n```python\n{code}```"),
        Candidate(problem="1_ReLU", language="python", level=1, sample=2, completion="no code at all"),
    ]
    config = EvalConfig(trials=1)
    evaluate([relu], cands, config, tmp_path / "r.jsonl", executor="inline", pm=pm)
    # once per language, with every extracted source, before the executor was even created
    assert recorder.calls == [("python", [code, code], config, 0)]


def test_kz_cuda_prepares_only_candidates_that_pass_the_static_check(
    cpu_torch, tmp_path, monkeypatch, plugins, native_build
):
    # This torch cannot build CUDA, so prepare() would skip everything; pretend it can: the build process
    # (which checks for itself) then reports the extension as unbuildable, which proves it ran the module.
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(inline, "can_build_cuda", lambda: True)
    solution = RELU_SOLUTION.read_text()
    cheat = solution.replace("return self.relu.relu_cuda(x)", "return torch.relu(x)")
    outcomes = prepare([solution, cheat, solution], "cpu")
    assert [o.status for o in outcomes] == [BuildStatus.UNBUILDABLE]
    assert len(outcomes[0].keys) == 1
    monkeypatch.undo()
    assert prepare([solution], "cpu") == []  # the real answer here: nothing can be built
    pm = plugins("kz_cuda")
    assert pm.hook.kz_prepare_candidates(language="cuda", sources=[solution], config=EvalConfig()) == []


# ------------------------------------------------------------------------------------------------------
# static check
# ------------------------------------------------------------------------------------------------------

KERNELBENCH = RELU_SOLUTION.read_text()


def test_static_check_accepts_kernelbench_style_solutions():
    assert check_source(KERNELBENCH) == []
    # the functions may be named like tensor methods, called on the extension object
    renamed = KERNELBENCH.replace("relu_cuda", "relu")
    assert check_source(renamed) == []
    # comments in the C++ may mention the libraries it does not use
    commented = KERNELBENCH.replace("__global__ void relu_kernel", "// faster than cuBLAS\n__global__ void relu_kernel")
    assert check_source(commented) == []


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("__global__ void relu_kernel", "__device__ void relu_kernel", "no CUDA kernel"),
        ("relu_ext = load_inline(", "relu_ext = dict(", "no `load_inline(...)` call"),
        ('relu_cuda_source = r"""\n', 'relu_cuda_source = r"""\n#include <cublas_v2.h>\n', "`#include <cublas"),
        (
            "    auto out = torch::empty_like(xc);",
            "    auto out = at::matmul(xc, xc);",
            "`at::matmul` is PyTorch compute",
        ),
        (
            "    auto out = torch::empty_like(xc);",
            "    auto out = torch::mm(xc, xc);",
            "`torch::mm` is PyTorch compute",
        ),
        ("    long long n = xc.numel();", "    long long n = xc.sum().item<long long>();", "tensor method `.sum()`"),
        ("    long long n = xc.numel();", "    long long n = at::native::numel(xc);", "`at::native`"),
        ("    long long n = xc.numel();", "    cublasHandle_t h; long long n = xc.numel();", "`cublasHandle_t`"),
        ('extra_ldflags=[""]', 'extra_ldflags=["-lcublas"]', "`-lcublas` in extra_ldflags"),
        ("return self.relu.relu_cuda(x)", "return torch.relu(x)", "calls `torch.relu`"),
        (
            "return self.relu.relu_cuda(x)",
            "y = self.relu.relu_cuda(x)\n        return y.sum()",
            "tensor method `.sum()`",
        ),
        ("from torch.utils.cpp_extension import load_inline", "from torch.utils.cpp_extension import load", "only"),
        ("from torch import nn\n", "from torch import nn\nimport kz_cuda\n", "NVRTC launcher"),
        ("from torch import nn\n", "from torch import nn\nimport threading\n", "`threading` is not allowed"),
        (
            "        return self.relu.relu_cuda(x)",
            "        try:\n            return self.relu.relu_cuda(x)\n        except RuntimeError:\n            return x",
            "try/except",
        ),
        ("class ModelNew", "class Other", "no `class ModelNew`"),
    ],
)
def test_static_check_rejects(old, new, expected):
    assert KERNELBENCH.count(old) >= 1, old
    problems = check_source(KERNELBENCH.replace(old, new, 1))
    assert any(expected in p for p in problems), problems


def test_static_check_names_the_module_line_of_a_cpp_violation():
    source = KERNELBENCH.replace("    auto out = torch::empty_like(xc);", "    auto out = torch::mm(xc, xc);")
    (problem,) = check_source(source)
    assert problem.startswith(f"line {line_of(source, 'torch::mm')}: ")


# ------------------------------------------------------------------------------------------------------
# prompt
# ------------------------------------------------------------------------------------------------------


def test_prompt_has_rules_and_a_load_inline_example_that_passes_the_check(plugins):
    from kz_cuda.prompt import INLINE_EXAMPLE

    pm = plugins("kz_cuda")
    (problem,) = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    groups = pm.hook.kz_prompt_sections(language="cuda-inline", problem=problem, template="kernelbench")
    titles = {s.title for group in groups for s in group}
    assert {"CUDA (load_inline) rules", "Example", "Task"} <= titles
    assert "Launcher API (kz_cuda)" not in titles  # that API belongs to the other dialect
    answer = INLINE_EXAMPLE.split("a correct answer is:\n```python\n")[1].split("```")[0]
    assert check_source(answer) == []
    assert "load_inline(" in answer and "__global__" in answer


# ------------------------------------------------------------------------------------------------------
# GPU only
# ------------------------------------------------------------------------------------------------------

GPU_CONFIG = EvalConfig(device="cuda", trials=3, reps=10, max_timing_s=2.0, timeout_s=300)


@pytest.mark.gpu
def test_kernelbench_solutions_are_correct_on_the_gpu_and_cached(plugins, tmp_path, monkeypatch):
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    pm = plugins("kz_cuda")
    problems = load_problems("builtin", pm=pm)
    solutions = load_solutions("builtin", problems, "cuda-inline", pm=pm)
    results = evaluate(problems, solutions, GPU_CONFIG, tmp_path / "r.jsonl", pm=pm)
    assert len(results) == len(SOLUTIONS)
    wrong = {r.problem: f"{r.status.value}: {r.message}" for r in results if r.status is not Status.CORRECT}
    assert not wrong, wrong
    assert all(r.size == "full" for r in results)
    # the prepare hook built them before the workers started: the workers only imported them
    assert len(list((tmp_path / "cache" / "cuda-inline").glob(f"*/{inline.OK_MARKER}"))) == len(SOLUTIONS)
    assert all(r.stages["compile"] < 20 for r in results), [r.stages for r in results]


@pytest.mark.gpu
def test_a_kernel_that_calls_torch_from_cpp_is_caught_at_runtime_on_the_gpu(plugins, tmp_path, monkeypatch):
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    pm = plugins("kz_cuda")
    problems = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    # ReLU by an ATen operator the static check does not list: the runtime guard still records it
    hidden = KERNELBENCH.replace("    auto out = torch::empty_like(xc);", "    auto out = at::threshold(xc, 0.0, 0.0);")
    hidden = hidden.replace("    relu_kernel<<<", "    return out;\n    relu_kernel<<<")
    cands = [Candidate(problem="1_ReLU", language="cuda-inline", level=1, sample=0, source=hidden)]
    (result,) = evaluate(problems, cands, GPU_CONFIG, tmp_path / "r.jsonl", workers=1, pm=pm)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "aten.threshold" in result.message
