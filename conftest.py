"""Test guard: no test sees installed entry-point plugins unless it asks for them. Each test gets a fresh
plugin manager holding only the core defaults; use the `plugins` fixture to register what it needs.

Slow tests are marked by what they use: a test that requests one of SLOW_FIXTURES, directly or through another
fixture (a module's pool fixture that requests `own_workers`), is marked `slow` at collection, so `make test-fast`
(`-m "not slow"`) leaves it out. Each of those fixtures says in its docstring why it is slow."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from kzcore.plugins import new_plugin_manager, set_plugin_manager

ROOT = Path(__file__).resolve().parent
ADVERSARIAL = ROOT / "tests" / "adversarial"


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_configure(config):
    """Caches on disk (problem checks, compiled extensions) start empty for each test session, as on a
    clean CI machine: a result cached by an earlier run must not hide what a test exercises."""
    if "KZ_CACHE" not in os.environ:
        os.environ["KZ_CACHE"] = config._kz_cache = tempfile.mkdtemp(prefix="kz-test-cache-")


def pytest_unconfigure(config):
    if getattr(config, "_kz_cache", None):
        shutil.rmtree(config._kz_cache, ignore_errors=True)


# The fixtures whose users are slow, each defined once in a conftest.py with a docstring saying why.
SLOW_FIXTURES = (
    "own_workers",
    "worker_replacement",
    "timeout_wait",
    "training",
    "native_build",
    "real_model",
    "whole_catalog",
    "rank_processes",  # tests/conftest.py
)


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the marks
def pytest_collection_modifyitems(config, items):
    slow = set(SLOW_FIXTURES)
    for item in items:
        if slow.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def isolated_plugins(monkeypatch):
    """A plugin manager with the core defaults only; entry points are not loaded."""
    monkeypatch.setenv("KZ_LOAD_PLUGINS", "")
    monkeypatch.setenv("KZ_TEST_PLUGINS", "1")  # tests that load entry points see kz_pylang ("kzcore.test" group)
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])  # the builtin suite is a plugin
    set_plugin_manager(pm)
    yield pm
    set_plugin_manager(None)


@pytest.fixture
def plugins(isolated_plugins):
    """``plugins("kz_triton", "tests.fakes:FAKE")`` registers importable plugin specs on the test's manager
    (workers rebuild the same set from these specs). Returns the manager."""
    from kzcore.plugins import import_spec

    pm = isolated_plugins

    def register(*specs: str):
        for spec in specs:
            if pm.get_plugin(spec) is None:
                pm.register(import_spec(spec), name=spec)
        return pm

    return register


@pytest.fixture
def one_torch_thread():
    """torch on one CPU thread for the test (tiny models gain nothing from threads, and on a loaded CPU
    oversubscribed threads make torch many times slower: 25 s instead of 0.7 s for one test, measured here).
    Test modules of tiny models use it for every test: ``pytestmark = pytest.mark.usefixtures(...)``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- slow fixtures (SLOW_FIXTURES): each names what a test that requests it does, and gives nothing; session-scoped,
# so that a module's fixture (a pool its tests share) can request one too


@pytest.fixture(scope="session")
def own_workers():
    """The test starts evaluator workers of its own (a pool, evaluate, check_problems, kz eval): seconds each."""


@pytest.fixture(scope="session")
def worker_replacement():
    """The test makes a shared pool replace its worker (a crash, a timeout, tampering): a new start, seconds."""


@pytest.fixture(scope="session")
def timeout_wait():
    """The test waits out a timeout, a deadline or a timer on purpose: seconds by design."""


@pytest.fixture(scope="session")
def training():
    """The test trains a tiny model (SFT or GRPO steps, a Trainer's phases): tens of seconds on a CPU."""


@pytest.fixture(scope="session")
def native_build():
    """The test builds native code (g++ or nvcc through load_inline, NVRTC) in processes: seconds to minutes."""


@pytest.fixture(scope="session")
def real_model():
    """The test converts and runs the embedded SmolLM2-135M, not a tiny model: hundreds of MB of weights."""


@pytest.fixture(scope="session")
def whole_catalog():
    """The test composes modules over the whole torch API catalog and runs each through the gates: ~10 s."""
