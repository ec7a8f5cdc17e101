"""The problem watch (kzcore.evaluate.refwatch): what it records of a problem module and its reference, what it
reports once something changed, and that a reference left alone never trips it, for every problem of the
built-in suite and of the vendored KernelBench levels 1 and 2 (their references run here at small size: a
reference that changed its own attributes while running would make every candidate on it `hack_suspected`).
The end-to-end cheats are in tests/test_adversarial.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from kzcore.evaluate import refwatch, sizes
from kzcore.language import import_module_from_file
from kzcore.plugins import new_plugin_manager
from kzcore.problems import load_problems

VENDORED = Path(__file__).resolve().parents[1] / "plugins" / "suites" / "kz_suites" / "kernelbench"

SOURCE = """
import torch
from torch import nn

scale = 2.0


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.linear(x)) * scale


def get_inputs():
    return [torch.randn(16, 8)]


def get_init_inputs():
    return []
"""


@pytest.fixture
def problem(tmp_path):
    path = tmp_path / "kz_problem_watch.py"
    path.write_text(SOURCE)
    module = import_module_from_file(path, "kz_problem_watch")
    reference = module.Model()
    return module, reference, refwatch.ProblemWatch(module, reference, seed=1234)


def test_running_the_reference_changes_nothing_the_watch_sees(problem):
    """BatchNorm in training mode updates its running statistics in place: buffers' values are not watched."""
    module, reference, watch = problem
    for _ in range(3):
        reference(*module.get_inputs())
    assert watch.findings() == [] and watch.values_changed() == []


@pytest.mark.parametrize(
    "change, found",
    [
        (lambda m, r: setattr(m, "get_inputs", lambda: [torch.zeros(16, 8)]), "problem.get_inputs"),
        (lambda m, r: setattr(m, "scale", 0.0), "problem.scale"),
        (lambda m, r: setattr(m, "extra", 1), "problem.extra"),
        (lambda m, r: setattr(m.Model, "forward", lambda self, x: x), "Model.forward"),
        (lambda m, r: setattr(r, "forward", lambda x: x), "reference.forward"),
        (lambda m, r: r.register_forward_pre_hook(lambda mod, args: None), "reference._forward_pre_hooks."),
        (lambda m, r: r.norm.register_forward_hook(lambda mod, a, o: None), "reference.norm._forward_hooks."),
        (lambda m, r: setattr(r, "linear", nn.Linear(8, 4)), "reference._modules.linear"),
        (
            lambda m, r: setattr(r.linear, "weight", nn.Parameter(torch.ones(4, 8))),
            "reference.linear._parameters.weight",
        ),
        (lambda m, r: setattr(m.get_inputs, "__code__", (lambda: []).__code__), "problem.get_inputs (its code"),
    ],
)
def test_a_changed_binding_attribute_or_hook_is_named(problem, change, found):
    module, reference, watch = problem
    change(module, reference)
    assert any(f.startswith(found) for f in watch.findings()), watch.findings()


def test_a_layer_class_of_the_reference_is_watched(problem):
    """nn.Linear.forward is what the reference's layer runs: replacing it on the class is found too."""
    _, _, watch = problem
    original = nn.Linear.forward
    try:
        nn.Linear.forward = lambda self, x: x
        assert "torch.nn.modules.linear.Linear.forward" in watch.findings()
    finally:
        nn.Linear.forward = original
    assert watch.findings() == []


def test_changed_parameter_values_are_found_even_when_their_sum_is_kept(problem):
    _, reference, watch = problem
    with torch.no_grad():
        weight = reference.linear.weight
        weight.copy_(weight.flip(0))  # the same values, rows swapped: sum and norm unchanged
    assert watch.values_changed() == ["reference.linear.weight"]
    with torch.no_grad():
        weight.copy_(weight.flip(0))
        reference.linear.bias.detach().zero_()  # through a detached view: the version counter does not move
    assert watch.values_changed() == ["reference.linear.bias"]


def test_sampled_positions_see_weights_made_trivial_and_the_fingerprint_sees_one_element(problem):
    """The per-call check compares sampled positions (all of a small parameter's): zeroing a weight moves them;
    the full fingerprint catches even one element changed in a parameter larger than the sample."""
    _, reference, watch = problem
    assert watch.samples_changed() == []
    with torch.no_grad():
        kept = reference.linear.weight.clone()
        reference.linear.weight.zero_()
    assert watch.samples_changed() == ["reference.linear.weight"]
    with torch.no_grad():
        reference.linear.weight.copy_(kept)
    assert watch.samples_changed() == [] and watch.values_changed() == []

    big = nn.Linear(256, 64)  # 16384 weights, more than SAMPLE positions
    module = type(sys)("kz_problem_big")
    watch = refwatch.ProblemWatch(module, big, seed=5)
    where = set(watch.samples[0][0].tolist())
    unsampled = next(i for i in range(big.weight.numel()) if i not in where)
    with torch.no_grad():
        big.weight.view(-1)[unsampled] += 1.0
    assert watch.samples_changed() == []  # a one-element change can fall between the samples...
    assert watch.values_changed() == ["reference.weight"]  # ...not past the fingerprint


def test_a_parameter_with_no_elements_is_watched_without_error():
    model = nn.Module()
    model.empty = nn.Parameter(torch.zeros(0))
    watch = refwatch.ProblemWatch(type(sys)("kz_problem_empty"), model, seed=1)
    assert watch.samples_changed() == [] and watch.values_changed() == []


def test_process_wide_module_hooks_are_read_and_compared():
    before = refwatch.global_hooks()
    assert "_global_forward_pre_hooks" in before
    handle = nn.modules.module.register_module_forward_pre_hook(lambda mod, args: None)
    try:
        assert refwatch.hooks_changed(before, refwatch.global_hooks()) == ["_global_forward_pre_hooks"]
    finally:
        handle.remove()
    assert refwatch.hooks_changed(before, refwatch.global_hooks()) == []


def _references(spec: str, **kwargs):
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    return load_problems(spec, pm=pm, **kwargs)


@pytest.mark.parametrize(
    "spec, kwargs",
    [
        ("builtin", {}),
        ("kernelbench:1", {"kernelbench": str(VENDORED)}),
        ("kernelbench:2", {"kernelbench": str(VENDORED)}),
    ],
)
def test_no_reference_of_the_suites_trips_the_watch_by_running(tmp_path, spec, kwargs):
    """Each reference built, watched and run twice at its small size (derived where the file has none), as the
    evaluator's trials run it: nothing may be found. Problems with no small size are skipped (full size does
    not fit a CPU test); at least half of each suite must be checked."""
    problems = _references(spec, **kwargs)
    checked, tripped = 0, {}
    for i, p in enumerate(problems):
        path = tmp_path / f"kz_problem_{i}.py"
        path.write_text(p.source)
        module = import_module_from_file(path, f"kz_problem_refwatch_{i}")
        used, _ = sizes.apply_profile(module, "small")
        if used == "full":
            continue
        torch.manual_seed(0)
        try:
            reference = module.Model(*module.get_init_inputs())
            watch = refwatch.ProblemWatch(module, reference, seed=7)
            with torch.no_grad():
                for _ in range(2):
                    reference(*module.get_inputs())
        except Exception:
            continue  # a derived size the reference cannot run (the problem check's concern, not this test's)
        checked += 1
        found = watch.findings() + watch.values_changed()
        if found:
            tripped[p.name] = found
    assert tripped == {}
    assert checked >= len(problems) // 2, f"only {checked} of {len(problems)} checked"


def test_process_settings_that_change_the_reference_speed_are_compared():
    """cuDNN, fused attention, deterministic algorithms and the CPU thread count: read without initialising CUDA,
    and a flip is named with its old and new value."""
    from kzcore.evaluate import integrity

    watch = integrity.Watch()
    assert watch.findings() == []
    before = torch.backends.cuda.flash_sdp_enabled()
    torch.backends.cuda.enable_flash_sdp(not before)
    try:
        (found,) = watch.findings()
        assert found.startswith(f"changed process setting(s) flash attention ({before} to {not before})")
    finally:
        torch.backends.cuda.enable_flash_sdp(before)
    assert watch.findings() == []
    assert not torch.cuda.is_initialized()


def test_the_second_shapes_problem_is_checked_whole_and_let_go(problem, tmp_path):
    """The second shape's reference is watched from its construction to the end of its trial, then checked (host
    side and values) and dropped, so its parameters are not kept on the device through the timing."""
    from kzcore.evaluate import integrity

    module, reference, _ = problem
    watch = integrity.Watch()
    watch.add_problem(module, reference)
    path = tmp_path / "kz_problem_watch_shape2.py"
    path.write_text(SOURCE)
    second = import_module_from_file(path, "kz_problem_watch_shape2")
    second_reference = second.Model()
    watch.add_problem(second, second_reference)
    with torch.no_grad():
        second_reference.linear.weight.zero_()
    (found,) = watch.retire_last()
    assert found == "changed the values of the reference's `reference.linear.weight`"
    assert len(watch.problems) == 1 and watch.problems[0].parameters[0][1] is reference.linear.weight
    assert watch.retire_last() == [] and watch.problems == []


def test_signal_handlers_numpy_error_callbacks_default_dtype_and_autocast_are_compared():
    """Python that runs at moments the candidate picks (a signal handler, NumPy's error callback) and switches that
    change what the reference computes in (the default dtype, autocast): each is named after a change, in the
    per-call check (`settings_findings`, part of `problem_findings`) as in the whole one."""
    import signal

    import numpy as np

    from kzcore.evaluate import integrity

    watch = integrity.Watch()
    assert watch.settings_findings() == [] and watch.findings() == []
    changes = [
        (lambda: signal.signal(signal.SIGALRM, lambda *_: None), lambda old: signal.signal(signal.SIGALRM, old),
         lambda: signal.getsignal(signal.SIGALRM), "the handler of SIGALRM"),
        (lambda: np.seterrcall(print), np.seterrcall, np.geterrcall, "NumPy's error callback"),
        (lambda: np.seterr(divide="call"), lambda old: np.seterr(**old), np.geterr, "NumPy's error handling"),
        (lambda: torch.set_autocast_enabled("cpu", True), lambda old: torch.set_autocast_enabled("cpu", old),
         lambda: torch.is_autocast_enabled("cpu"), "autocast on cpu"),
    ]  # fmt: skip
    for change, restore, read, name in changes:
        old = read()
        change()
        try:
            found = watch.settings_findings()
            assert len(found) == 1 and name in found[0], (name, found)
            assert any(name in f for f in watch.problem_findings())
        finally:
            restore(old)
        assert watch.settings_findings() == [], name
    assert watch.findings() == []
