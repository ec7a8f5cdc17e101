"""The plugin manager: installed entry points, KZ_LOAD_PLUGINS / KZ_DISABLE_PLUGINS, specs that workers
rebuild the plugin set from, and an entry-point language plugin (kz_pylang) evaluated end to end."""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

from kzcore import PROJECT
from kzcore.errors import KzError
from kzcore.evaluate.runner import evaluate
from kzcore.plugins import DEFAULT_PLUGINS, TEST_GROUP, languages, new_plugin_manager, plugin_specs
from kzcore.problems import load_problems
from kzcore.types import Candidate, EvalConfig, Status
from tests import fakes_hooks

PY_RELU = """import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def entry_point_names(pm) -> set[str]:
    return {name for name, _ in pm.list_name_plugin() if name not in DEFAULT_PLUGINS}


@pytest.mark.parametrize(
    "name, module, group",
    [("triton", "kz_triton", PROJECT), ("pylang", "kz_pylang", TEST_GROUP), ("cuda", "kz_cuda", PROJECT)],
)
def test_plugin_is_installed(name, module, group):
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}
    assert name in eps, f"{module} is not installed with a {group!r} entry point"
    assert eps[name].value == module
    plugin = eps[name].load()
    assert plugin is importlib.import_module(module)
    assert hasattr(plugin.kz_register_languages, f"{PROJECT}_impl")


def test_entry_points_load_by_default(monkeypatch):
    monkeypatch.delenv("KZ_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("KZ_DISABLE_PLUGINS", raising=False)
    pm = new_plugin_manager(load_entry_points=True)
    assert entry_point_names(pm) == {"triton", "pylang", "models", "cuda", "ray", "suites"}
    assert sorted(languages(pm).items) == ["cuda", "cuda-inline", "python", "triton"]
    assert languages(pm).owners == {"triton": "triton", "python": "pylang", "cuda": "cuda", "cuda-inline": "cuda"}
    # the defaults are registered last, so every installed plugin's implementation is called before them
    impls = [pm.get_name(i.plugin) for i in pm.hook.kz_extract_source.get_hookimpls()]
    assert impls[0] == "kzcore.builtins.languages"  # trylast: first in pluggy's list, called last


def test_load_plugins_env_selects(monkeypatch):
    monkeypatch.setenv("KZ_LOAD_PLUGINS", "triton")
    pm = new_plugin_manager(load_entry_points=True)
    assert entry_point_names(pm) == {"triton"}
    assert pm.get_plugin("pylang") is None
    assert set(DEFAULT_PLUGINS) <= {name for name, _ in pm.list_name_plugin()}
    monkeypatch.setenv("KZ_LOAD_PLUGINS", " pylang , triton ")
    assert entry_point_names(new_plugin_manager()) == {"triton", "pylang"}
    monkeypatch.setenv("KZ_LOAD_PLUGINS", "")
    assert entry_point_names(new_plugin_manager()) == set()


def test_disable_plugins_env(monkeypatch):
    monkeypatch.delenv("KZ_LOAD_PLUGINS", raising=False)
    monkeypatch.setenv("KZ_DISABLE_PLUGINS", "pylang")
    pm = new_plugin_manager()
    assert entry_point_names(pm) == {"triton", "models", "cuda", "ray", "suites"}
    assert "python" not in languages(pm).items
    monkeypatch.setenv("KZ_DISABLE_PLUGINS", "pylang,triton,models,cuda,ray,suites")
    assert entry_point_names(new_plugin_manager()) == set()
    monkeypatch.setenv("KZ_LOAD_PLUGINS", "triton,pylang")  # disabling wins over selecting
    monkeypatch.setenv("KZ_DISABLE_PLUGINS", "triton")
    assert entry_point_names(new_plugin_manager()) == {"pylang"}


def test_plugin_specs_round_trip(monkeypatch):
    monkeypatch.setenv("KZ_LOAD_PLUGINS", "triton")
    pm = new_plugin_manager(extra=["tests.fakes_hooks:RESULT_RECORDER", "tests.fakes_hooks"])
    specs = plugin_specs(pm)
    assert sorted(specs) == sorted(["kz_triton", "tests.fakes_hooks:RESULT_RECORDER", "tests.fakes_hooks"])
    assert not set(specs) & set(DEFAULT_PLUGINS)
    rebuilt = new_plugin_manager(load_entry_points=False, extra=specs)  # what a worker does
    assert sorted(plugin_specs(rebuilt)) == sorted(specs)
    assert rebuilt.get_plugin("kz_triton") is pm.get_plugin("triton")
    assert rebuilt.get_plugin("tests.fakes_hooks:RESULT_RECORDER") is fakes_hooks.RESULT_RECORDER
    assert {type(p) for p in rebuilt.get_plugins()} == {type(p) for p in pm.get_plugins()}


def test_unreachable_plugin_object_is_an_error(isolated_plugins):
    class LocalPlugin:  # defined in a function: a worker could not import it
        pass

    isolated_plugins.register(LocalPlugin(), name="local-fake")
    with pytest.raises(KzError, match="plugin 'local-fake' is an object workers cannot re-create"):
        plugin_specs(isolated_plugins)


def test_python_language_through_entry_points(monkeypatch, tmp_path, own_workers):
    monkeypatch.delenv("KZ_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("KZ_DISABLE_PLUGINS", raising=False)
    pm = new_plugin_manager(load_entry_points=True)
    assert "pylang" in entry_point_names(pm)
    (relu,) = [p for p in load_problems("builtin:1", pm=pm) if p.name == "1_ReLU"]
    cands = [
        Candidate(problem="1_ReLU", language="python", level=1, sample=0, source=PY_RELU),
        Candidate(problem="1_ReLU", language="python", level=1, sample=1, source=PY_RELU.replace("relu", "sigmoid")),
        Candidate(problem="1_ReLU", language="python", level=1, sample=2, completion=f"```python\n{PY_RELU}```"),
    ]
    results = evaluate([relu], cands, EvalConfig(trials=2, timeout_s=60), tmp_path / "r.jsonl", workers=1, pm=pm)
    by_sample = {r.sample: r for r in results}
    assert by_sample[0].status is Status.CORRECT, by_sample[0].message
    assert by_sample[0].device == "cpu" and by_sample[0].size == "small"
    assert by_sample[1].status is Status.INCORRECT
    assert by_sample[2].status is Status.CORRECT, by_sample[2].message


def test_policy_plugin_from_entry_point_drives_kz_eval(monkeypatch, tmp_path, capsys, own_workers):
    """A policy backend living outside the core (kz_pylang's pylang-echo), found through its entry point,
    swapped in with --policy alone."""
    from kzcore.cli import main
    from kzcore.plugins import set_plugin_manager

    monkeypatch.delenv("KZ_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("KZ_DISABLE_PLUGINS", raising=False)
    set_plugin_manager(new_plugin_manager(load_entry_points=True))
    out = tmp_path / "r.jsonl"
    args = ["eval", "--problems", "builtin:2", "--language", "python", "--policy", "pylang-echo", "-n", "2"]
    assert main([*args, "--out", str(out), "--workers", "1", "--trials", "1"]) == 0
    text = capsys.readouterr().out
    assert "100.0%" in text  # every level-2 problem solved by echoing its own architecture
    assert len([x for x in out.read_text().splitlines() if '"correct"' in x]) >= 24


SECRET_PROBE = """
import os
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        leaked = [k for k in os.environ if "TOKEN" in k or "API_KEY" in k]
        assert not leaked, f"worker environment leaks {leaked}"
        import resource
        assert resource.getrlimit(resource.RLIMIT_CORE)[0] == 0
        return torch.relu(x)
"""


def test_worker_environment_is_scrubbed_and_limited(plugins, tmp_path, monkeypatch, own_workers):
    from kzcore.evaluate.runner import evaluate
    from kzcore.problems import load_problems
    from kzcore.types import Candidate, EvalConfig

    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    pm = plugins("kz_pylang")
    problems = [p for p in load_problems("builtin:1") if p.name == "1_ReLU"]
    cand = Candidate(problem="1_ReLU", language="python", level=1, source=SECRET_PROBE)
    (result,) = evaluate(problems, [cand], EvalConfig(trials=1), tmp_path / "r.jsonl", workers=1, pm=pm)
    assert result.correct, result.message
