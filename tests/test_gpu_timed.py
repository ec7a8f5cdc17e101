"""On a GPU, what is timed is what was checked: work skipped or reused only while timed, a borrowed view of
freed device memory, and work left running past the end event on a side stream, each against the real timer
and evaluator. The CPU halves of these defences are in tests/test_timed_integrity.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kzcore.evaluate.runner import evaluate
from kzcore.problems import load_problems
from kzcore.types import Candidate, EvalConfig, Status

pytestmark = pytest.mark.gpu
HERE = Path(__file__).parent


def _candidate(name: str, problem: str, folder: str = "adversarial") -> Candidate:
    source = (HERE / folder / f"{name}.py").read_text()
    return Candidate(problem=problem, language="triton", level=1, sample=0, source=source, origin=name)


def _evaluate_numbered(names, plugins, tmp_path) -> dict:
    """Each (candidate file, built-in level-1 problem, folder) of ``names`` evaluated as sample i on the GPU;
    results by sample."""
    import attrs

    candidates = [attrs.evolve(_candidate(n, p, f), sample=i) for i, (n, p, f) in enumerate(names)]
    wanted = {p for _, p, _ in names}
    problems = [p for p in load_problems("builtin:1") if p.name in wanted]
    results = evaluate(problems, candidates, EvalConfig(trials=2), tmp_path / "r.jsonl", pm=plugins("kz_triton"))
    return {r.sample: r for r in results}


def test_timed_skips_reuse_and_borrowed_outputs_on_the_gpu(plugins, tmp_path):
    names = [
        ("timed_skip_stack", "1_ReLU", "adversarial"),
        ("timed_skip_count", "1_ReLU", "adversarial"),
        ("borrowed_freed", "1_ReLU", "adversarial"),
        ("sampled_value_cache", "1_ReLU", "adversarial"),
        ("views_reshape", "4_LeakyReLU", "legit"),
    ]
    results = _evaluate_numbered(names, plugins, tmp_path)
    summary = {names[i][0]: (r.status.value, r.speedup, r.timed_checks, r.message[:300]) for i, r in results.items()}
    print(summary)
    # telling a timed call by its call stack needs `traceback` or frame access, both refused before anything runs;
    # the skip itself, told apart another way, is timed_skip_some's test below
    assert results[0].status is Status.STATIC_CHECK_FAILED, summary
    assert "traceback" in results[0].message, summary
    # the count-based skip is caught wherever its count lands: a timed pair, or a trial when the precompile's
    # compile-only forward shifted its count onto the second shape
    assert results[1].status in (Status.HACK_SUSPECTED, Status.INCORRECT), summary
    assert results[2].status is Status.HACK_SUSPECTED, summary
    assert "does not own its memory" in results[2].message, summary
    # never paid for a cache hit while timed: either refused (on a GPU the precompile's compile-only forward
    # fills its cache, so trial 0 hits and launches nothing) or timed as its kernel runs
    cache = results[3]
    assert cache.status is not Status.CORRECT or cache.speedup < 1.5, summary
    assert results[4].status is Status.CORRECT and results[4].timed_checks >= 1, summary
    assert results[4].spot_checked >= EvalConfig().min_reps, summary  # every timed pair (GPU generator and gathers)


def test_a_skip_in_some_timed_calls_is_caught_by_the_spot_checks_on_the_gpu(plugins, tmp_path):
    """Only the last pair is drawn for the full check (share 0): skips on three placements of eight, in pairs
    before the last, are left to the spot checks."""
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "1_ReLU"]
    config = EvalConfig(trials=2, timed_check_share=0.0)
    (result,) = evaluate(problems, [_candidate("timed_skip_some", "1_ReLU")], config, tmp_path / "r.jsonl", pm=pm)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.message.startswith("timed pair "), result.message
    assert "differs from the reference's on the same inputs" in result.message, result.message


def test_changing_the_reference_its_layers_hooks_weights_or_settings_is_caught_on_the_gpu(plugins, tmp_path):
    """The problem watch and the process settings on the real timer: each cheat slows the reference or makes it
    trivial (caught at full size, as on the CPU), while an honest LayerNorm beside them stays correct with the
    per-call watch running after each of its timed calls."""
    names = [
        ("slow_reference", "1_ReLU", "adversarial"),
        ("global_hook_reference", "1_ReLU", "adversarial"),
        ("oneshot_hook_reference", "1_ReLU", "adversarial"),
        ("cudnn_off", "1_ReLU", "adversarial"),
        ("zeroed_weights", "13_LayerNorm", "adversarial"),
        ("layernorm", "13_LayerNorm", "legit"),
    ]
    results = _evaluate_numbered(names, plugins, tmp_path)
    summary = {names[i][0]: (r.status.value, r.speedup, r.message[:200]) for i, r in results.items()}
    print(summary)
    for i in range(5):
        assert results[i].status is Status.HACK_SUSPECTED, summary
    assert results[5].status is Status.CORRECT and results[5].speedup, summary


def test_a_candidate_that_empties_the_allocator_cache_while_timed_is_hack_suspected(plugins, tmp_path):
    """torch.cuda.empty_cache after each call: the reference's next output allocation would be a cudaMalloc inside
    its timed call. The allocator's statistics around the candidate's call of a checked pair (the last always)
    show the release."""
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "1_ReLU"]
    candidate = _candidate("empty_cache_reference", "1_ReLU")
    (result,) = evaluate(problems, [candidate], EvalConfig(trials=2), tmp_path / "r.jsonl", pm=pm)
    assert result.status is Status.HACK_SUSPECTED, (result.status, result.speedup, result.message)
    assert "gave the caching allocator's memory back to the device" in result.message, result.message


def test_work_left_running_past_the_end_event_is_refused_by_the_timer():
    """The candidate returns with its matmuls still running on a side stream the calling stream never waits
    for; the reference joins the same work. The device-wide synchronize after each call waits for it, so the
    gap to the event after it gives it away."""
    import torch

    from kzcore.builtins.timing import time_cuda
    from kzcore.errors import TimedCheckFailed

    side = torch.cuda.Stream()
    a = torch.randn(2048, 2048, device="cuda")

    def unjoined():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = a
            for _ in range(4):
                out = out @ a
        return out

    def joined():
        out = unjoined()
        torch.cuda.current_stream().wait_stream(side)
        return out

    joined()
    torch.cuda.synchronize()
    config = EvalConfig(device="cuda", reps=20, min_reps=20)
    with pytest.raises(TimedCheckFailed, match="left GPU work running after their end event"):
        time_cuda(joined, unjoined, config)
    assert time_cuda(joined, joined, config).ref_ms > 0  # honest work on a joined stream is timed, not refused


def test_bf16_operands_only_while_timed_are_caught_by_the_precision_policy_on_the_spots(plugins, tmp_path):
    """IEEE fp32 tile products in the trials, bf16 ones in the timed calls: inside the elementwise tolerance, so
    only the precision policy on the timed pairs' spot values tells."""
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "23_Linear"]
    (result,) = evaluate(
        problems, [_candidate("bf16_while_timed", "23_Linear")], EvalConfig(), tmp_path / "r.jsonl", pm=pm
    )
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "computes below the problem's precision while timed" in result.message, result.message
