"""A kernel language is a registered `Language` object that the core asks: the per-language hooks' defaults
delegate to it (a plugin's own hookimpl still answers first), and the worker's environment, its writable
caches and the tamper watch's packages come from every registered language — the bundled ones exactly as
they were hard-coded before, and a third-party one (the toy kz_pylang, which imports only from kzcore)
with every defence the bundled ones get."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

import kz_pylang
from kzcore import Language, LaunchCounter, PromptSection, hookimpl
from kzcore.errors import KzError
from kzcore.evaluate import integrity
from kzcore.executors import caches
from kzcore.executors.local import LocalPool
from kzcore.language import kernel_namespaces, own_packages, tracked_packages, worker_environment, writable_caches
from kzcore.plugins import languages_of
from kzcore.problems import load_problems
from kzcore.types import Candidate, EvalConfig, EvalJob, Problem, Status

CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=60)


class Recording(Language):
    """Answers every question with something recognisable, and notes which were asked."""

    name = "recording"
    fence_tags = ("rec",)

    def __init__(self):
        super().__init__()
        self.asked: list[str] = []

    def static_check(self, source):
        self.asked.append("static_check")
        return [f"recording saw {len(source)} characters"]

    def prepare_candidates(self, sources, config):
        return f"prepared {len(sources)}"

    def prompt_sections(self, problem, template):
        return [PromptSection("Recording rules", f"for {template}", order=20)]

    def worker_started(self, device):
        self.asked.append(f"worker_started {device}")

    def load_candidate(self, path, device):
        return types.ModuleType(f"loaded_{device}")

    def instrument(self, module):
        return LaunchCounter(lambda: 7)

    def kernel_names(self, module):
        return [f"{module.__name__}_kernel"]

    def precompile(self, model, inputs):
        return len(inputs) == 2


class RegistersRecording:
    def __init__(self):
        self.language = Recording()

    @hookimpl
    def kz_register_languages(self, register):
        register(self.language)


class OverridesStaticCheck:
    @hookimpl
    def kz_static_check(self, language, source):
        return ["the plugin's own check"] if language == "recording" else None


def test_the_core_defaults_ask_the_registered_language_object(isolated_plugins, tmp_path):
    pm = isolated_plugins
    plugin = RegistersRecording()
    pm.register(plugin, name="recording")
    hook, module = pm.hook, types.ModuleType("cand")
    assert hook.kz_static_check(language="recording", source="abc") == ["recording saw 3 characters"]
    assert hook.kz_load_candidate(language="recording", path=tmp_path / "c.py", device="cpu").__name__ == "loaded_cpu"
    assert hook.kz_instrument_candidate(language="recording", module=module)() == 7
    assert hook.kz_kernel_names(language="recording", module=module) == ["cand_kernel"]
    assert hook.kz_precompile(language="recording", model=None, inputs=[1, 2]) is True
    assert hook.kz_prepare_candidates(language="recording", sources=["a", "b"], config=CONFIG) == ["prepared 2"]
    hook.kz_worker_started(device="cpu")
    assert plugin.language.asked == ["static_check", "worker_started cpu"]
    # a language nobody registered: every default says "not mine"
    assert hook.kz_static_check(language="nosuch", source="abc") is None
    assert hook.kz_load_candidate(language="nosuch", path=tmp_path / "c.py", device="cpu") is None
    # a plugin's own implementation still answers before the default
    pm.register(OverridesStaticCheck(), name="override")
    assert hook.kz_static_check(language="recording", source="abc") == ["the plugin's own check"]


def test_prompt_sections_come_from_the_language_object(isolated_plugins):
    from kzcore.prompts import build_prompt

    isolated_plugins.register(RegistersRecording(), name="recording")
    relu = next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")
    body = build_prompt(relu, "recording", template="principles", pm=isolated_plugins)[1]["content"]
    assert body.index("## Task") < body.index("## Recording rules\n\nfor principles") < body.index("## Architecture")


def test_extraction_prefers_the_languages_fence_tags(isolated_plugins):
    isolated_plugins.register(RegistersRecording(), name="recording")
    completion = "```rec\nclass ModelNew: ours\n```\nThe old one was:\n```python\nclass ModelNew: quoted\n```\n"
    extract = isolated_plugins.hook.kz_extract_source
    assert extract(language="recording", completion=completion) == "class ModelNew: ours\n"
    # a language nobody registered (and the bare extractor) keeps "the last block that defines ModelNew"
    assert extract(language="nosuch", completion=completion) == "class ModelNew: quoted\n"


def test_a_language_is_constructible_from_keywords_or_a_subclass():
    plain = Language(name="mylang", description="d", fence_tags=["x"], needs_gpu=True, guard_torch_ops=False)
    assert (plain.name, plain.description, plain.fence_tags, plain.needs_gpu, plain.guard_torch_ops) == (
        "mylang", "d", ("x",), True, False,
    )  # fmt: skip
    assert plain.static_check("anything") == [] and plain.worker_environment("cpu") == {}
    assert Recording().own_packages == ("tests",)  # default: the package that defines the class
    with pytest.raises(ValueError, match="has no name"):
        Language()


# ----------------------------------------------------------------------------------------------------
# what the workers get, from all registered languages together
# ----------------------------------------------------------------------------------------------------


def test_bundled_languages_give_the_worker_what_was_hard_coded(monkeypatch, tmp_path):
    """The environment, writable paths and watched packages kzcore hard-coded before languages said them."""
    for variable in ("TRITON_HOME", "TRITON_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.setenv(variable, str(tmp_path / variable))
    bundled = languages_of(["kz_triton", "kz_cuda"])
    assert worker_environment(bundled, "cpu") == {"TRITON_INTERPRET": "1"}
    assert worker_environment(bundled, "cuda") == {"TRITON_INTERPRET": "0"}
    assert own_packages(bundled) == ("kzcore", "kz_triton", "kz_cuda")
    from kzcore.cache import cache_root

    home, scratch = Path.home(), tmp_path / "scratch"
    declared = [str(p) for p in writable_caches(bundled)]
    # of the declared caches only the cuda-inline builds stay writable: Triton's, the driver's and CuPy's are
    # shared with other processes (a policy's vLLM reads ~/.triton), so each worker gets its own instead
    assert sorted(caches.writable_paths(scratch, declared)) == sorted([scratch, cache_root() / "cuda-inline"])
    assert sorted(caches.refused_writable(declared)) == sorted(
        [str(home / ".triton"), str(tmp_path / "TRITON_HOME" / ".triton"), str(tmp_path / "TRITON_CACHE_DIR")]
    )


def test_bundled_languages_declare_the_packages_and_namespaces_the_core_hard_coded(plugins):
    """The run header's packages and the static check's kernel namespaces, as kzcore listed them itself."""
    from kzcore.results import tracked_packages as recorded

    bundled = languages_of(["kz_triton", "kz_cuda"])
    assert tracked_packages(bundled) == ("triton", "cupy-cuda12x", "cupy-cuda13x", "cuda-python")
    assert kernel_namespaces(bundled) == ("tl", "triton")
    hard_coded = {
        "kzcore",
        "torch",
        "triton",
        "pluggy",
        "attrs",
        "numpy",
        "cupy-cuda12x",
        "cupy-cuda13x",
        "cuda-python",
    }
    assert set(recorded(plugins("kz_triton", "kz_cuda"))) == hard_coded


class RegistersLanguage:
    def __init__(self, language):
        self.language = language

    @hookimpl
    def kz_register_languages(self, register):
        register(self.language)


def test_a_languages_tracked_packages_and_kernel_namespaces_reach_the_core(isolated_plugins):
    from kzcore.evaluate.static import ModuleInfo, forward_violations
    from kzcore.results import run_header

    source = "class ModelNew:\n    def forward(self, x):\n        return mylib.sum(x)\n"

    def violations():
        return forward_violations(ModuleInfo(ast.parse(source)))

    assert violations() == ["line 3: calls tensor method `.sum()` (PyTorch compute) in the forward path"]
    assert "pytest" not in run_header(CONFIG, {}, [], argv=[])["packages"]
    mylang = Language(name="mylang", tracked_packages=["pytest"], kernel_namespaces=["mylib"])
    isolated_plugins.register(RegistersLanguage(mylang), name="mylang")
    assert violations() == []  # mylib.sum is the language's kernel API, not a tensor method
    assert run_header(CONFIG, {}, [], argv=[], pm=isolated_plugins)["packages"]["pytest"] == pytest.__version__


def test_two_languages_setting_one_variable_differently_cannot_share_a_worker():
    class Interpreted(Language):
        def worker_environment(self, device):
            return {"TRITON_INTERPRET": "1"}

    with pytest.raises(KzError, match="languages 'triton' and 'other' set TRITON_INTERPRET differently"):
        worker_environment([*languages_of(["kz_triton"]), Interpreted(name="other")], "cuda")
    assert worker_environment([*languages_of(["kz_triton"]), Interpreted(name="other")], "cpu") == {
        "TRITON_INTERPRET": "1"
    }


def test_a_third_party_languages_environment_is_in_the_pools_worker_environment():
    pool = LocalPool(workers=1, config=CONFIG, plugins=["kz_pylang", "kz_triton"])
    env = pool._env(None)
    assert env["KZ_PYLANG_DEVICE"] == "cpu" and env["TRITON_INTERPRET"] == "1"


def test_the_watch_covers_a_third_party_languages_package_and_object(monkeypatch):
    watch = integrity.Watch([kz_pylang.PYLANG])
    assert watch.findings() == []
    monkeypatch.setattr(kz_pylang, "kz_register_languages", lambda register: None)
    assert watch.findings() == [
        "replaced `kz_pylang.kz_register_languages` (monkey-patching the evaluator, timers or torch)"
    ]
    monkeypatch.undo()
    kz_pylang.PYLANG.load_candidate = lambda path, device: None  # shadows the class's method
    try:
        assert watch.findings() == [
            "added `Language['python'].load_candidate` (monkey-patching the evaluator, timers or torch)"
        ]
    finally:
        del kz_pylang.PYLANG.load_candidate
    assert watch.findings() == []


def test_kz_eval_says_when_a_gpu_only_language_runs_on_a_cpu(plugins, tmp_path, capsys):
    from kzcore.cli import main

    plugins("tests.fakes_hooks:FAKE_LANGUAGE", "kz_triton")  # fakelang: needs_gpu=True
    (tmp_path / "none").mkdir()
    for language, noted in (("fakelang", True), ("triton", False)):
        argv = ["eval", "--problems", "builtin:1", "--solutions", str(tmp_path / "none"), "--language", language]
        assert main([*argv, "--device", "cpu", "--out", str(tmp_path / "r.jsonl")]) == 1  # (no candidates)
        err = " ".join(capsys.readouterr().err.split())
        assert ("note: fakelang candidates need a GPU; on this CPU they are checked and compiled" in err) is noted


# ----------------------------------------------------------------------------------------------------
# a third-party language in real workers: its environment, its cache, its package in the tamper watch
# ----------------------------------------------------------------------------------------------------

ENV_PROBE = """import os
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError("KZ_PYLANG_DEVICE=" + os.environ.get("KZ_PYLANG_DEVICE", "unset"))
"""

CACHE_PROBE = """from pathlib import Path

from torch import nn


def attempt(directory):
    try:
        Path(directory, "entry").write_text("written from a candidate")
        return "written"
    except OSError as exc:
        return exc.strerror


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError(f"cache: {attempt(CACHE)}; elsewhere: {attempt(ELSEWHERE)}")
"""

TAMPER = """import sys as _interpreter

import torch
from torch import nn

_pylang = _interpreter.modules["kz_pylang"]
{patch}


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
PATCHES = {  # what the toy language's own code is patched with -> what the watch reports
    "_pylang.kz_register_languages = lambda register: None": "replaced `kz_pylang.kz_register_languages`",
    "_pylang.PyLang.static_check = lambda self, source: []": "replaced `kz_pylang.PyLang.static_check`",
    "_pylang.PYLANG.instrument = lambda module: None": "added `Language['python'].instrument`",
}


@pytest.fixture(scope="module")
def relu() -> Problem:
    return next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")


@pytest.fixture(scope="module")
def pylang_pool(tmp_path_factory, own_workers):
    cache = tmp_path_factory.mktemp("pylang-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(kz_pylang.CACHE_ENV, str(cache))  # read where the pool starts its workers
        with LocalPool(workers=1, config=CONFIG, plugins=["kz_pylang"]) as pool:
            pool.cache = cache
            yield pool


def run(pool, problem, *sources):
    jobs = [
        EvalJob(problem, Candidate(problem=problem.name, language="python", level=1, sample=i, source=s), CONFIG)
        for i, s in enumerate(sources)
    ]
    return sorted(pool.map(jobs), key=lambda r: r.sample)


def test_a_third_party_languages_environment_reaches_its_workers(pylang_pool, relu):
    (result,) = run(pylang_pool, relu, ENV_PROBE)
    assert result.status is Status.RUNTIME_ERROR and "KZ_PYLANG_DEVICE=cpu" in result.message, result.message


def test_a_third_party_languages_cache_is_writable_in_the_sandbox_and_nothing_else(pylang_pool, relu, tmp_path):
    fences = pylang_pool.info["sandbox"]
    if fences.get("filesystem") != "readonly":
        pytest.skip(f"this machine cannot give workers a read-only filesystem: {fences.get('filesystem')}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    source = CACHE_PROBE.replace("(CACHE)", f"({str(pylang_pool.cache)!r})").replace(
        "(ELSEWHERE)", f"({str(elsewhere)!r})"
    )
    (result,) = run(pylang_pool, relu, source)
    assert "cache: written; elsewhere: Read-only file system" in result.message, result.message
    assert (pylang_pool.cache / "entry").read_text() == "written from a candidate"
    assert not (elsewhere / "entry").exists()


def test_patching_a_third_party_languages_code_is_hack_suspected(pylang_pool, relu):
    replaced = pylang_pool.replaced
    results = run(pylang_pool, relu, *(TAMPER.format(patch=patch) for patch in PATCHES))
    for result, reported in zip(results, PATCHES.values(), strict=True):
        assert result.status is Status.HACK_SUSPECTED, result.message
        assert result.message.startswith(f"after its import, the candidate's code {reported} ("), result.message
    assert pylang_pool.replaced == replaced + len(PATCHES)  # a tampered process evaluates nothing more
