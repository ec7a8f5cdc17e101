"""The built-in suite is a plugin (kz_suites), registered like any third-party suite: the core ships no
problems and imports no plugin package, so without kz_suites there is no ``builtin``."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
from pathlib import Path

import pytest

from kzcore import PROJECT
from kzcore.errors import KzError, ProblemFormatError
from kzcore.plugins import new_plugin_manager, plugin_specs, suites
from kzcore.problems import load_problems, load_solutions

ROOT = Path(__file__).resolve().parents[3]
PLUGIN_PACKAGES = {"kz_cuda", "kz_triton", "kz_models", "kz_ray", "kz_suites"}


def test_plugin_is_installed():
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=PROJECT)}
    assert "suites" in eps, f"kz_suites is not installed with a {PROJECT!r} entry point"
    assert eps["suites"].value == "kz_suites"
    plugin = eps["suites"].load()
    assert plugin is importlib.import_module("kz_suites")
    assert hasattr(plugin.kz_register_suites, f"{PROJECT}_impl")
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    registry = suites(pm)
    assert registry.owners["builtin"] == "kz_suites"
    assert Path(registry.get("builtin")) == plugin.BUILTIN_SUITE
    assert registry.owners["kernelbench"] == "kz_suites"
    assert Path(registry.get("kernelbench")) == plugin.KERNELBENCH_COPY
    assert "kz_suites" in plugin_specs(pm)  # workers rebuild the suite from this spec


def test_the_installed_plugin_ships_the_problems_and_solutions():
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    problems = load_problems("builtin", pm=pm)
    assert sum(p.level == 1 for p in problems) == 27
    assert sum(p.level == 2 for p in problems) == 13
    level1 = [p for p in problems if p.level == 1]
    assert len(load_solutions("builtin", level1, "triton", pm=pm)) == 27
    assert load_solutions("builtin", level1, "cuda", pm=pm)


def test_the_vendored_kernelbench_files_are_unchanged():
    """Every file of the KernelBench copy matches its MANIFEST.sha256 (its README says where they came from)."""
    import hashlib

    from kz_suites import KERNELBENCH_COPY

    folder = KERNELBENCH_COPY.parent
    manifest = [line.split(maxsplit=1) for line in (folder / "MANIFEST.sha256").read_text().splitlines()]
    assert len(manifest) == 200
    changed = [name for digest, name in manifest if hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest]
    assert not changed
    assert sorted(str(p.relative_to(folder)) for p in KERNELBENCH_COPY.rglob("*.py")) == sorted(n for _, n in manifest)


def test_without_the_plugin_builtin_is_not_a_suite(tmp_path, monkeypatch):
    from tests import fakes_hooks

    (tmp_path / "level1").mkdir()
    monkeypatch.setattr(fakes_hooks.FAKE_SUITES, "path", tmp_path)
    pm = new_plugin_manager(load_entry_points=False, extra=["tests.fakes_hooks:FAKE_SUITES"])
    assert "builtin" not in suites(pm).items
    with pytest.raises(KzError, match=r"no suite named 'builtin'; installed: mysuite"):
        suites(pm).get("builtin")
    with pytest.raises(ProblemFormatError, match=r"'builtin:1' is neither a path nor a suite \(suites: mysuite\)"):
        load_problems("builtin:1", pm=pm)
    bare = new_plugin_manager(load_entry_points=False)
    with pytest.raises(ProblemFormatError, match=r"\(suites: none\)"):
        load_problems("builtin", pm=bare)


def plugin_imports(path: Path) -> list[str]:
    """``file:line module`` for each import of a plugin package in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno} {m}" for m in modules if m.split(".")[0] in PLUGIN_PACKAGES]
    return found


def test_no_core_module_imports_a_plugin():
    files = sorted((ROOT / "kzcore").rglob("*.py"))
    assert len(files) > 20  # the scan sees the core
    found = [hit for path in files for hit in plugin_imports(path)]
    assert not found, "the core imports plugin packages:\n" + "\n".join(found)


def test_the_scan_finds_a_plugin_import(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    path = tmp_path / "m.py"
    path.write_text("import os\nfrom kz_cuda import load_kernels\nimport kz_triton.static as s\nfrom . import x\n")
    assert plugin_imports(path) == ["m.py:2 kz_cuda", "m.py:3 kz_triton.static"]
