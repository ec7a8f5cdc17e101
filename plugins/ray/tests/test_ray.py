"""The ray executor (kz_ray) on a local Ray cluster started once for this module, with candidates in the Triton
interpreter: the same verdicts as the local executor, faults that cost a worker but never an actor, an actor
that dies under a job, actors whose workers die with them, and ``kz eval --executor ray``.

The cluster has three logical CPUs: two for the shared pool, one for the tests that start a pool of their
own (each evaluation slot asks Ray for one CPU).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

ray = pytest.importorskip(
    "ray", reason="ray is not installed (the test set-up installs it: pip install -e plugins/ray)"
)

from kz_ray.executor import RayPool  # noqa: E402
from kz_suites import BUILTIN_SUITE  # noqa: E402
from kzcore import PROJECT  # noqa: E402
from kzcore.cli import main  # noqa: E402
from kzcore.executors.local import LocalPool  # noqa: E402
from kzcore.plugins import executors, new_plugin_manager  # noqa: E402
from kzcore.problems import load_problems, load_solutions  # noqa: E402
from kzcore.results import read_headers, read_results  # noqa: E402
from kzcore.types import Candidate, EvalConfig, EvalJob, Problem, Status, to_json  # noqa: E402

ADVERSARIAL = Path(__file__).resolve().parents[3] / "tests" / "adversarial"
SUITE = BUILTIN_SUITE
# the trials' draws fixed by the seed alone (no secret salt), so both executors judge the same inputs
CONFIG = EvalConfig(device="cpu", trials=2, timeout_s=60, secret_inputs=False)
SPECS = ["kz_triton", "tests.fakes_ray:ACTOR_KILLER"]

# A correct ReLU whose forward makes the worker plugin tests/fakes_ray.py kill the process that started the
# worker: under Ray, the slot's actor.
KILL_PARENT = (
    SUITE / "solutions" / "triton" / "level1" / "1_ReLU.py"
).read_text() + "\nModelNew.kz_kill_my_actor = True\n"


@pytest.fixture(scope="module")
def cluster(own_workers):
    ray.init(num_cpus=3, include_dashboard=False, logging_level=logging.WARNING)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def suite() -> tuple[dict[str, Problem], dict[str, Candidate]]:
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_suites"])
    problems = load_problems("builtin", pm=pm)
    solutions = load_solutions("builtin", problems, "triton", pm=pm)
    return {p.name: p for p in problems}, {c.problem: c for c in solutions}


@pytest.fixture(scope="module")
def pool(cluster):
    with RayPool(workers=2, config=CONFIG, plugins=SPECS) as shared:
        yield shared


def job(suite, name: str, *, source: str | None = None, sample: int = 0, config: EvalConfig = CONFIG) -> EvalJob:
    problems, solutions = suite
    problem = problems[name]
    cand = Candidate(
        problem=name, language="triton", level=problem.level, sample=sample, source=source or solutions[name].source
    )
    return EvalJob(problem, cand, config)


def comparable(result) -> dict:
    row = to_json(result)
    del row["stages"]  # seconds per stage: the only field that differs between two runs of one candidate
    return row


def process_state(pid: int) -> str:
    """The state letter in /proc (R running, S sleeping, Z exited but not reaped); "" when there is none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return ""


def is_gone(pid: int) -> bool:
    return process_state(pid) in ("", "Z")


def test_plugin_is_installed():
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=PROJECT)}
    assert "ray" in eps, f"kz_ray is not installed with a {PROJECT!r} entry point"
    assert eps["ray"].value == "kz_ray"
    pm = new_plugin_manager(load_entry_points=False, extra=["kz_ray"])
    assert executors(pm).get("ray") is RayPool
    assert executors(pm).owners["ray"] == "kz_ray"


def test_builtin_solutions_get_the_local_executors_verdicts(pool, suite):
    names = ["1_ReLU", "3_Sigmoid", "1_Gemm_BiasAdd_ReLU"]  # the last: nn.Linear weights, level 2
    jobs = [job(suite, name) for name in names]
    on_ray = {r.problem: r for r in pool.map(jobs)}
    with LocalPool(workers=1, config=CONFIG, plugins=SPECS) as local:
        on_local = {r.problem: r for r in local.map(jobs)}

    assert sorted(on_ray) == sorted(names)
    for name in names:
        assert on_ray[name].status is Status.CORRECT, on_ray[name].message
        assert comparable(on_ray[name]) == comparable(on_local[name])
    assert pool.info["executor"] == "ray" and pool.info["slots"] == 2
    assert pool.info["device_name"] == "cpu" and pool.info["torch"]


def test_problem_travels_as_source(pool, suite, tmp_path):
    # The problem's path names a broken file here; a node must evaluate the source the driver read.
    broken = tmp_path / "1_ReLU.py"
    broken.write_text("raise RuntimeError('not the problem that was shipped')\n")
    shipped = job(suite, "1_ReLU")
    shipped = attrs.evolve(shipped, problem=attrs.evolve(shipped.problem, path=str(broken)))
    (result,) = pool.map([shipped])
    assert result.status is Status.CORRECT, result.message


def test_crash_and_hang_cost_a_worker_not_the_actor(pool, suite):
    short = EvalConfig(device="cpu", trials=2, timeout_s=3)
    actors = [ray.get(s.actor.info.remote())["actor_pid"] for s in pool.slots]
    jobs = [
        job(suite, "1_ReLU", source=(ADVERSARIAL / "crash_segv.py").read_text(), sample=0),
        job(suite, "1_ReLU", source=(ADVERSARIAL / "infinite_loop.py").read_text(), sample=1, config=short),
        job(suite, "1_ReLU", sample=2),
        job(suite, "3_Sigmoid", sample=3),
    ]
    results = {r.sample: r for r in pool.map(jobs)}

    assert sorted(results) == [0, 1, 2, 3]
    assert results[0].status is Status.RUNTIME_ERROR and "crash" in results[0].message
    assert "SIGSEGV" in results[0].message
    assert results[1].status is Status.TIMEOUT and "3 s" in results[1].message
    assert results[2].status is Status.CORRECT and results[3].status is Status.CORRECT
    # the same actors serve on: only their worker processes were replaced
    assert pool.replaced == 0
    assert [ray.get(s.actor.info.remote())["actor_pid"] for s in pool.slots] == actors


def test_a_job_whose_actor_dies_is_retried_once_then_filed(pool, suite):
    jobs = [
        job(suite, "1_ReLU", source=KILL_PARENT, sample=0),
        job(suite, "1_ReLU", sample=1),
        job(suite, "3_Sigmoid", sample=2),
        job(suite, "4_LeakyReLU", sample=3),
    ]
    before = pool.replaced
    results = [r for r in pool.map(jobs)]

    assert sorted(r.sample for r in results) == [0, 1, 2, 3]  # every job filed exactly once
    by_sample = {r.sample: r for r in results}
    assert by_sample[0].status is Status.RUNTIME_ERROR
    assert "the Ray actor evaluating this candidate died 2 times" in by_sample[0].message
    assert all(by_sample[i].status is Status.CORRECT for i in (1, 2, 3)), [by_sample[i].message for i in (1, 2, 3)]
    assert pool.replaced == before + 2  # the killed actors were replaced, and the replacements serve
    (after,) = pool.map([job(suite, "1_ReLU", sample=4)])
    assert after.status is Status.CORRECT


def test_close_kills_the_actor_and_a_worker_mid_candidate(cluster, suite):
    with RayPool(workers=1, config=CONFIG, plugins=SPECS) as one:
        (slot,) = one.slots
        actor_pid, worker_pid = slot.info["actor_pid"], slot.info["pid"]
        results = one.map(
            [
                job(suite, "1_ReLU"),
                job(suite, "1_ReLU", source=(ADVERSARIAL / "infinite_loop.py").read_text(), sample=1),
            ]
        )
        assert next(results).status is Status.CORRECT  # the spinning candidate was queued right behind it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process_state(worker_pid) != "R":
            time.sleep(0.2)
        assert process_state(worker_pid) == "R", "the worker never started the spinning candidate"
        results.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (is_gone(actor_pid) and is_gone(worker_pid)):
        time.sleep(0.2)
    assert is_gone(actor_pid), "close() left the actor running"
    assert is_gone(worker_pid), "the worker outlived its actor (still spinning on the node)"


def test_slot_workers_die_with_the_process_that_started_them():
    # Ray also reaps an actor's children when the raylet sees the actor go; the lifeline covers the rest
    # (the raylet itself gone, `ray stop --force`, a Ray without that feature).
    script = (
        "import time\n"
        "from kz_ray.slot import LifelineContext\n"
        "child = LifelineContext().Process(target=time.sleep, args=(120,), daemon=True)\n"
        "child.start()\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert not is_gone(child)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not is_gone(child):
        time.sleep(0.1)
    assert is_gone(child), "the worker outlived the process that started it"


def test_kz_eval_with_the_ray_executor(cluster, plugins, tmp_path, capsys):
    plugins("kz_triton", "kz_ray")
    problems, solutions = tmp_path / "problems" / "level1", tmp_path / "solutions" / "level1"
    problems.mkdir(parents=True)
    solutions.mkdir(parents=True)
    for name in ("1_ReLU", "3_Sigmoid"):
        shutil.copy(SUITE / "level1" / f"{name}.py", problems)
        shutil.copy(SUITE / "solutions" / "triton" / "level1" / f"{name}.py", solutions)
    out = tmp_path / "runs" / "r.jsonl"
    argv = ["eval", "--problems", str(problems.parent), "--solutions", str(solutions.parent), "--language", "triton"]
    argv += ["--out", str(out), "--trials", "2", "--workers", "1", "--timeout", "60", "--executor", "ray"]

    assert main(argv) == 0
    assert f"results:{out}" in "".join(capsys.readouterr().out.split())  # rich may wrap the path
    results = read_results(out)
    assert sorted((r.problem, r.status) for r in results) == [("1_ReLU", Status.CORRECT), ("3_Sigmoid", Status.CORRECT)]
    (header,) = read_headers(out)
    assert header["executor"]["executor"] == "ray" and header["executor"]["slots"] == 1
    assert sum(json.loads(line)["type"] == "result" for line in out.read_text().splitlines()) == 2
