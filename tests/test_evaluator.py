"""The evaluator end to end: the real pipeline in real spawned workers (language "triton" under the CPU
interpreter) on built-in problems, against the reference solutions and the adversarial candidates in
tests/adversarial/ (one module per cheat or fault).

Most tests share one module-scoped LocalPool (a worker start costs seconds); the ones that crash or hang a
worker also prove that this same pool keeps serving. `evaluate()` (results file, resume) runs its own pool.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from kz_triton.static import check_source
from kzcore.builtins.timing import CPU_NOTE
from kzcore.evaluate.runner import evaluate
from kzcore.executors.local import LocalPool
from kzcore.plugins import new_plugin_manager, plugin_specs
from kzcore.problems import load_problems, load_solutions
from kzcore.results import read_headers, read_results
from kzcore.types import Candidate, EvalConfig, EvalJob, EvalResult, Problem, Status, to_json

ADVERSARIAL = Path(__file__).resolve().parent / "adversarial"

# device="cpu" pins the Triton interpreter and the "small" size profile even on a machine with a GPU.
CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=60)
PIPELINE_STAGES = {
    "static",
    "compile",
    "load_problem",
    "construct",
    "inputs",
    "candidate",
    "reference",
    "check",
    "timing",
}


def adversarial(kind: str) -> str:
    return (ADVERSARIAL / f"{kind}.py").read_text()


@pytest.fixture(scope="module")
def suite() -> tuple[dict[str, Problem], dict[str, Candidate]]:
    """Every built-in problem by name, and its built-in Triton solution."""
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    problems = load_problems("builtin", pm=pm)
    assert len({p.name for p in problems}) == len(problems)  # names are unique across levels
    solutions = load_solutions("builtin", problems, "triton", pm=pm)
    return {p.name: p for p in problems}, {c.problem: c for c in solutions}


@pytest.fixture(scope="module")
def pool():
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_triton"])
    specs = plugin_specs(pm)
    assert specs == ["kz_triton"]
    with LocalPool(workers=1, config=CONFIG, plugins=specs) as shared:
        yield shared


def run_one(
    pool: LocalPool,
    problem: Problem,
    *,
    source: str | None = None,
    completion: str | None = None,
    config: EvalConfig = CONFIG,
    origin: str = "",
) -> EvalResult:
    cand = Candidate(
        problem=problem.name,
        language="triton",
        level=problem.level,
        source=source,
        completion=completion,
        origin=origin,
    )
    results = list(pool.map([EvalJob(problem, cand, config)]))
    assert len(results) == 1
    assert results[0].problem == problem.name
    return results[0]


def worker_pid(pool: LocalPool) -> int:
    (worker,) = pool.start().workers.values()  # start(): a replacement may still be starting
    return worker.info["pid"]


# ------------------------------------------------------------------------------------------------------
# 1. built-in reference solutions (4. and 5. too: a level-2 problem with weights, int64 targets)
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "1_ReLU",
        "11_Softmax",
        "19_Matmul",
        "1_Gemm_BiasAdd_ReLU",  # level 2, nn.Linear + bias: correct only if both models got the same weights
        "17_CrossEntropyLoss",  # int64 targets: the kernel indexes with them, the reference rejects floats
    ],
)
def test_builtin_solution_is_correct(pool, suite, name):
    problems, solutions = suite
    solution = solutions[name]
    result = run_one(pool, problems[name], source=solution.source, origin=solution.origin)

    assert result.status is Status.CORRECT, result.message
    assert result.message == ""
    assert result.level == problems[name].level
    assert result.launches >= CONFIG.trials  # each trial's forward launched the candidate's own kernel
    assert result.device == "cpu" and result.size == "small"
    assert result.trials == CONFIG.trials
    assert result.max_abs_err is not None and result.max_abs_err <= CONFIG.atol + CONFIG.rtol
    # every stage of the pipeline ran and was clocked
    assert PIPELINE_STAGES <= set(result.stages), result.stages
    assert all(seconds >= 0 for seconds in result.stages.values())
    assert result.stages["candidate"] > 0
    # CPU: no timing figures, and a note that says why
    assert result.timing_note == CPU_NOTE
    assert result.ref_ms is None and result.cand_ms is None and result.speedup is None
    assert result.timing_reps == 0


# ------------------------------------------------------------------------------------------------------
# 2. cheats and faults
# ------------------------------------------------------------------------------------------------------


def test_kernel_writing_zeros_is_incorrect(pool, suite):
    problems, _ = suite
    result = run_one(pool, problems["1_ReLU"], source=adversarial("zeros_output"))
    assert result.status is Status.INCORRECT, result.message
    assert result.message.startswith("trial 0: output:") and "outside atol" in result.message
    assert result.launches == 1  # it did launch its kernel: the output comparison is what caught it
    assert result.max_abs_err > CONFIG.atol


def test_half_written_empty_output_is_incorrect(pool, suite):
    problems, _ = suite
    result = run_one(pool, problems["1_ReLU"], source=adversarial("half_output"))
    assert result.status is Status.INCORRECT, result.message
    assert re.match(r"trial \d: output", result.message), result.message
    assert result.launches >= 1


def test_kernel_storing_into_its_input_is_hack_suspected(pool, suite):
    problems, _ = suite
    source = adversarial("inplace_input")
    assert check_source(source) == []  # only the runtime comparison of inputs can see this
    result = run_one(pool, problems["1_ReLU"], source=source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "modified its input(s) [0]" in result.message and "read-only" in result.message
    # found after the first forward, before the output was compared
    assert result.launches == 1 and "check" not in result.stages


def test_torch_softmax_in_forward_fails_the_static_check(pool, suite):
    problems, _ = suite
    result = run_one(pool, problems["11_Softmax"], source=adversarial("torch_softmax"))
    assert result.status is Status.STATIC_CHECK_FAILED, result.message
    assert "`torch.softmax`" in result.message
    assert set(result.stages) == {"static"}  # nothing was imported or run
    assert result.launches == 0


def test_torch_compute_hidden_from_the_static_check_is_caught_at_runtime(pool, suite):
    problems, _ = suite
    source = adversarial("hidden_torch_op")
    assert check_source(source) == []  # the lambda's `t.clamp(min=0)` slips past the AST check
    result = run_one(pool, problems["1_ReLU"], source=source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert "PyTorch compute operators" in result.message and "aten.clamp" in result.message
    assert result.launches == 1  # its copy kernel did run; the guard is what flagged it


def test_forward_launching_no_kernel_is_hack_suspected(pool, suite):
    problems, _ = suite
    source = adversarial("no_launch")
    assert check_source(source) == []  # a kernel is defined and forward only clones: statically clean
    result = run_one(pool, problems["1_ReLU"], source=source)
    assert result.status is Status.HACK_SUSPECTED, result.message
    assert result.status is not Status.CORRECT
    assert "launched none of the candidate's own triton kernels" in result.message
    assert result.launches == 0


def test_a_forward_returning_nothing_is_incorrect_not_a_cheat(pool, suite):
    """A completion cut off before its ``return`` launches nothing and returns None: wrong, not a hack (a
    hack's penalty would punish the Coder for its token limit); one that returns a tensor no kernel of its own
    wrote stays hack_suspected (above)."""
    problems, _ = suite
    source = adversarial("no_launch").replace("        return x.clone()\n", "        out = x.clone()\n")
    result = run_one(pool, problems["1_ReLU"], source=source)
    assert result.status is Status.INCORRECT, result.message
    assert result.launches == 0 and "None" in result.message


def test_try_except_fallback_fails_the_static_check(pool, suite):
    problems, _ = suite
    result = run_one(pool, problems["1_ReLU"], source=adversarial("try_fallback"))
    assert result.status is Status.STATIC_CHECK_FAILED, result.message
    assert "try/except is not allowed" in result.message
    assert set(result.stages) == {"static"}


def test_syntax_error_is_a_compile_error_with_its_line(pool, suite):
    problems, _ = suite
    source = adversarial("syntax_error")
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.strip().startswith("break"))
    result = run_one(pool, problems["1_ReLU"], source=source)
    assert result.status is Status.COMPILE_ERROR, result.message
    assert "SyntaxError" in result.message and f"line {line}" in result.message
    assert "candidate" not in result.stages  # it never ran


def test_completion_without_a_code_block_is_a_format_error(pool, suite):
    problems, _ = suite
    completion = "I would write a Triton kernel that applies max(x, 0) to every element, one block per program."
    result = run_one(pool, problems["1_ReLU"], completion=completion)
    assert result.status is Status.FORMAT_ERROR, result.message
    assert "ModelNew" in result.message
    assert set(result.stages) == {"extract"}


def _chatty_completion(first: str, last: str) -> str:
    return (
        "<think>\nThe reference is torch.relu. A draft:\n```python\nclass ModelNew:\n    pass\n```\n"
        "No, that launches nothing.\n</think>\n"
        f"A first attempt:\n\n```python\n{first}```\n\nOn reflection, this version is the one:\n\n"
        f"```python\n{last}```\n"
    )


def test_completion_with_reasoning_and_two_blocks_uses_the_last(pool, suite):
    problems, solutions = suite
    good, zeros = solutions["1_ReLU"].source, adversarial("zeros_output")

    result = run_one(pool, problems["1_ReLU"], completion=_chatty_completion(zeros, good))
    assert result.status is Status.CORRECT, result.message
    assert result.launches >= CONFIG.trials
    assert "extract" in result.stages

    # the same blocks the other way round: now the zeros kernel is the last block, and it is what runs
    swapped = run_one(pool, problems["1_ReLU"], completion=_chatty_completion(good, zeros))
    assert swapped.status is Status.INCORRECT, swapped.message


def test_worker_crash_is_a_runtime_error_and_the_pool_keeps_going(pool, suite, worker_replacement):
    problems, solutions = suite
    pid_before, replaced_before = worker_pid(pool), pool.replaced

    result = run_one(pool, problems["1_ReLU"], source=adversarial("crash_segv"))
    assert result.status is Status.RUNTIME_ERROR, result.message
    assert "crash" in result.message
    assert pool.replaced == replaced_before + 1
    assert worker_pid(pool) != pid_before

    after = run_one(pool, problems["1_ReLU"], source=solutions["1_ReLU"].source)
    assert after.status is Status.CORRECT, after.message


def test_endless_forward_times_out_and_the_pool_keeps_going(pool, suite, timeout_wait, worker_replacement):
    problems, solutions = suite
    pid_before, replaced_before = worker_pid(pool), pool.replaced
    short = EvalConfig(device="cpu", trials=2, timeout_s=5)

    t0 = time.monotonic()
    result = run_one(pool, problems["1_ReLU"], source=adversarial("infinite_loop"), config=short)
    elapsed = time.monotonic() - t0
    assert result.status is Status.TIMEOUT, result.message
    assert "no result within 5 s" in result.message
    assert short.timeout_s <= elapsed < short.timeout_s + 30  # killed at the deadline, not left to spin
    assert pool.replaced == replaced_before + 1
    assert worker_pid(pool) != pid_before
    with pytest.raises(ProcessLookupError):  # the spinning worker is gone
        os.kill(pid_before, 0)

    after = run_one(pool, problems["1_ReLU"], source=solutions["1_ReLU"].source)
    assert after.status is Status.CORRECT, after.message


# ------------------------------------------------------------------------------------------------------
# 4. identical weights, 5. dtypes and shapes
# ------------------------------------------------------------------------------------------------------


def test_parameters_created_in_another_order_are_incorrect(pool, suite):
    problems, _ = suite
    problem = problems["1_Gemm_BiasAdd_ReLU"]
    swapped = adversarial("param_order")
    result = run_one(pool, problem, source=swapped)
    assert result.status is Status.INCORRECT, result.message
    assert "outside atol" in result.message

    # Control: the same module with the two parameter lines put back in Model's order is correct, so the
    # order alone (the seeded RNG draws) decides, not the kernel.
    bias = "        self.bias = nn.Parameter(torch.randn(out_features))\n"
    gemm = "        self.gemm = nn.Linear(in_features, out_features, bias=False)\n"
    assert bias + gemm in swapped
    fixed = run_one(pool, problem, source=swapped.replace(bias + gemm, gemm + bias))
    assert fixed.status is Status.CORRECT, fixed.message


def test_wrong_output_dtype_is_incorrect(pool, suite):
    problems, _ = suite
    result = run_one(pool, problems["17_CrossEntropyLoss"], source=adversarial("wrong_dtype"))
    assert result.status is Status.INCORRECT, result.message
    assert "dtype torch.float64, expected torch.float32" in result.message


def test_wrong_output_shape_is_incorrect(pool, suite):
    problems, _ = suite
    result = run_one(pool, problems["17_CrossEntropyLoss"], source=adversarial("wrong_shape"))
    assert result.status is Status.INCORRECT, result.message
    assert re.search(r"has shape \(\d+, 1\), expected \(\d+,\)", result.message), result.message


# ------------------------------------------------------------------------------------------------------
# Bugs found while writing these tests (see the report). The first two cheats are judged `correct` every
# time; the last two tests catch races and allocator luck, so they fail most runs, not every run.
# ------------------------------------------------------------------------------------------------------


def test_torch_compute_on_a_helper_thread_is_not_correct(pool, suite):
    """The guard's TorchDispatchMode is thread-local, and the static check only follows *called* functions,
    so `threading.Thread(target=helper)` runs torch.relu unseen by both."""
    problems, _ = suite
    result = run_one(pool, problems["1_ReLU"], source=adversarial("thread_offload"))
    assert result.status in (Status.STATIC_CHECK_FAILED, Status.HACK_SUSPECTED), (result.status, result.message)


def test_candidate_switching_off_the_guard_is_not_correct(suite, own_workers):
    """A candidate runs in the evaluator's own process, so at import time it can rebind harness state
    (here `kzcore.evaluate.guard._depth`). Own pool: the tampered worker must not serve other tests."""
    problems, _ = suite
    with LocalPool(workers=1, config=CONFIG, plugins=["kz_triton"]) as own:
        result = run_one(own, problems["1_ReLU"], source=adversarial("tamper_guard"))
    assert result.status is not Status.CORRECT, result.message


def test_half_written_output_never_passes_a_trial_on_stale_memory(pool, suite):
    """On CPU nothing poisons freed memory, so the unwritten half of a `torch.empty` output can hold the
    previous job's reference output for the same seed, and a one-trial evaluation passes (about 1 in 10)."""
    problems, _ = suite
    one_trial = EvalConfig(device="cpu", trials=1, timeout_s=60)
    cand = Candidate(problem="1_ReLU", language="triton", level=1, source=adversarial("half_output"))
    results = list(pool.map([EvalJob(problems["1_ReLU"], cand, one_trial) for _ in range(30)]))
    assert len(results) == 30
    passed = [i for i, r in enumerate(results) if r.status is not Status.INCORRECT]
    assert passed == [], f"evaluations {passed} of 30 judged a half-written output {results[passed[0]].status}"


def test_crash_message_names_the_signal(pool, suite, worker_replacement):
    """A dead worker's pipe and sentinel can be ready before the process is reapable; the pool then
    describes it before its exit status exists ("did not exit") instead of "was killed by SIGSEGV"."""
    problems, _ = suite
    source = adversarial("crash_segv")
    messages = [run_one(pool, problems["1_ReLU"], source=source).message for _ in range(6)]
    assert all("killed by SIGSEGV" in m for m in messages), messages


# ------------------------------------------------------------------------------------------------------
# 3. results file: streaming, run header, resume
# ------------------------------------------------------------------------------------------------------


def test_evaluate_streams_jsonl_and_resumes_without_reevaluating(plugins, suite, tmp_path, own_workers):
    pm = plugins("kz_triton")
    problems = load_problems("builtin:1", pm=pm)
    _, solutions = suite
    good, zeros = solutions["1_ReLU"].source, adversarial("zeros_output")
    out = tmp_path / "runs" / "results.jsonl"

    def cand(sample: int, source: str) -> Candidate:
        return Candidate(problem="1_ReLU", language="triton", level=1, sample=sample, source=source)

    starts, filed = [], []
    first = evaluate(
        problems,
        [cand(0, good), cand(1, zeros)],
        CONFIG,
        out,
        workers=1,
        pm=pm,
        on_start=lambda done, todo: starts.append((done, todo)),
        on_result=filed.append,
    )
    assert starts == [(0, 2)]
    assert {r.sample: r.status for r in first} == {0: Status.CORRECT, 1: Status.INCORRECT}
    assert [r.key for r in filed] == [r.key for r in first]

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["type"] for row in rows] == ["run", "result", "result"]
    header = rows[0]
    assert header["config"] == to_json(CONFIG)
    assert header["plugins"] == ["kz_suites", "kz_triton"]
    for package in ("torch", "triton", "pluggy", "attrs"):
        assert header["packages"].get(package), f"{package} version missing from {header['packages']}"
    assert header["executor"]["torch"] == header["packages"]["torch"]  # what the worker imported
    assert header["executor"]["device_name"] == "cpu"
    by_sample = {row["sample"]: row for row in rows[1:]}
    assert by_sample[0]["status"] == "correct" and by_sample[1]["status"] == "incorrect"
    assert by_sample[0]["launches"] >= CONFIG.trials and by_sample[0]["stages"]["candidate"] > 0
    assert sorted(r.key for r in read_results(out)) == sorted(r.key for r in first)

    # The same inputs again: nothing runs, nothing is written, the saved verdicts come back.
    before = out.read_bytes()
    starts.clear()
    again = evaluate(
        problems,
        [cand(0, good), cand(1, zeros)],
        CONFIG,
        out,
        workers=1,
        pm=pm,
        on_start=lambda done, todo: starts.append((done, todo)),
    )
    assert starts == [(2, 0)]
    assert {r.sample: r.status for r in again} == {0: Status.CORRECT, 1: Status.INCORRECT}
    assert out.read_bytes() == before

    # Same keys, sources swapped: the saved verdicts judged other code, so they are retracted (on_stale hears
    # which) and both candidates run again; their verdicts flip.
    starts.clear()
    stale = []
    swapped = evaluate(
        problems,
        [cand(0, zeros), cand(1, good)],
        CONFIG,
        out,
        workers=1,
        pm=pm,
        on_start=lambda done, todo: starts.append((done, todo)),
        on_stale=stale.extend,
    )
    assert sorted(r.sample for r in stale) == [0, 1]
    assert starts == [(0, 2)]
    assert {r.sample: r.status for r in swapped} == {0: Status.INCORRECT, 1: Status.CORRECT}
    assert out.read_bytes().startswith(before)
    assert {r.sample: r.status for r in read_results(out)} == {0: Status.INCORRECT, 1: Status.CORRECT}

    # One new candidate among the old ones: only it runs, under a new run header.
    after_swap = out.read_bytes()
    starts.clear()
    third = evaluate(
        problems,
        [cand(0, zeros), cand(1, good), cand(2, adversarial("no_launch"))],
        CONFIG,
        out,
        workers=1,
        pm=pm,
        on_start=lambda done, todo: starts.append((done, todo)),
    )
    assert starts == [(2, 1)]
    assert {r.sample: r.status for r in third} == {0: Status.INCORRECT, 1: Status.CORRECT, 2: Status.HACK_SUSPECTED}
    new_lines = out.read_bytes()[len(after_swap) :].decode().splitlines()
    assert [json.loads(line)["type"] for line in new_lines] == ["run", "result"]
    assert len(read_headers(out)) == 3
