"""Checking problem modules themselves, in evaluator workers (the module is untrusted when a Proposer
wrote it): it constructs and runs within a memory budget, twice alike, with finite and non-degenerate
outputs.

Worker side: `check_problem_job`; parent side: `check_problems` (through any executor), and `checked_problems`,
which `kz eval` uses: one check per problem, cached on disk by what decides its verdict."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from kzcore.evaluate import refwatch, sizes
from kzcore.evaluate.checking import check_outputs
from kzcore.evaluate.degeneracy import degeneracy_reasons, one_ulp_away, rounding_noise_reasons
from kzcore.evaluate.magnitude import pieces
from kzcore.evaluate.pipeline import as_list, candidate_error, clone_inputs, is_fatal_device_error
from kzcore.problems import import_module_from_file
from kzcore.types import EvalConfig, Problem, ProblemCheckJob, ProblemReport, from_json, to_json

# ProblemCheckJob.max_bytes = DEVICE_BUDGET: the budget is FREE_FRACTION of the memory free when the check
# starts (GPU: torch.cuda.mem_get_info; CPU: available RAM), not a fixed figure
DEVICE_BUDGET = 0
FREE_FRACTION = 0.8
PROPOSER_BUDGET = 16 * 2**30  # what check_problems uses unless told (the Proposer's gate)
OVER_BUDGET = "memory budget"  # in the reason of a reference that needed more than its budget
# Two runs agree when they differ by float-reordering noise only (cuDNN's nondeterministic algorithms):
# per element at most DETERMINISM_ELEMENT x (|y| + mean |y|), and in norm DETERMINISM_NORM x ||y||, each
# raised to a few ulps of the output's dtype. Dropout or torch.rand in forward change whole elements.
DETERMINISM_ELEMENT = 1e-3
DETERMINISM_NORM = 1e-5
CHECK_VERSION = 5  # bump when a change to the checks should invalidate cached reports

_counter = itertools.count()


class _Failed(Exception):
    pass


def _run(
    module, device: str, seed_init: int, seed_inputs: int, seed_forward: int, nudged: bool = False, watch: bool = False
):
    """(outputs, bytes of its tensors, what the watch found) of a fresh model (weights from ``seed_init``) on
    inputs from ``seed_inputs``; the RNG is re-seeded with ``seed_forward`` just before forward, so randomness
    inside forward shows up as a difference between two runs that differ only in that seed. ``nudged``: every floating input moved one ulp
    (`degeneracy.one_ulp_away`). ``watch``: the evaluator's problem watch (`refwatch.ProblemWatch`) around
    the run, whose findings must be empty: a reference that changes its own module, attributes, hooks or weights
    while it runs would make every candidate on it `hack_suspected`."""
    import torch

    with torch.device(device):
        torch.manual_seed(seed_init)
        init = list(module.get_init_inputs())
        torch.manual_seed(seed_init)
        model = module.Model(*init)
        watcher = refwatch.ProblemWatch(module, model, seed=seed_forward) if watch else None
        torch.manual_seed(seed_inputs)
        inputs = list(module.get_inputs())
    if nudged:  # one input at a time, each original let go as its copy is made
        for k in range(len(inputs)):
            if isinstance(inputs[k], torch.Tensor):
                inputs[k] = one_ulp_away(inputs[k], seed_inputs)
    torch.manual_seed(seed_forward)
    with torch.no_grad():
        outputs = as_list(model(*clone_inputs(inputs)))
    if device == "cuda":
        torch.cuda.synchronize()
    changed = watcher.findings() + watcher.values_changed() if watcher is not None else []
    bad = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
    if bad:
        raise _Failed(f"forward returned {', '.join(bad)}; outputs must be tensors")
    tensors = [*model.parameters(), *model.buffers(), *(x for x in inputs if isinstance(x, torch.Tensor)), *outputs]
    return outputs, sum(t.numel() * t.element_size() for t in tensors), changed


def free_bytes(device: str) -> int:
    """Memory free for a problem now: the GPU's free memory, or the host's available RAM."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def float_pieces(a, b):
    """``a`` and ``b`` (complex as pairs of reals) in matching float64 pieces (`magnitude.pieces`), NaN and
    Inf replaced by finite values."""
    import torch

    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    for x, y in pieces(a, b):
        yield x.double().nan_to_num(), y.double().nan_to_num()


def runs_differ(first: list, again: list) -> str:
    """Why two runs of the same model on the same inputs disagree beyond float-reordering noise ("" when
    they do not). Compared piece by piece (`magnitude.pieces`), in float64 with NaN and Inf made finite."""
    import torch

    for i, (a, b) in enumerate(zip(first, again)):
        where = f"output {i}" if len(first) > 1 else "output"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: shape or dtype differs between runs"
        if not (a.is_floating_point() or a.is_complex()):
            if not torch.equal(a, b):
                return f"{where}: {int((a != b).sum())} of {a.numel()} elements differ"
            continue
        if not a.numel():
            continue
        eps = torch.finfo(a.dtype).eps if a.is_floating_point() else torch.finfo(a.real.dtype).eps
        element_tol, norm_tol = max(DETERMINISM_ELEMENT, 4 * eps), max(DETERMINISM_NORM, eps)
        # first pass: the mean |x| every element's bound adds, and the two norms; second: the elements off
        abs_sum = diff_sq = ref_sq = 0.0
        count = 0
        for x, y in float_pieces(a, b):
            abs_sum += float(x.abs().sum())
            diff_sq += float((x - y).square().sum())
            ref_sq += float(x.square().sum())
            count += x.numel()
        scale = abs_sum / count
        off = sum(int(((x - y).abs() > element_tol * (x.abs() + scale)).sum()) for x, y in float_pieces(a, b))
        ratio = math.sqrt(diff_sq) / max(math.sqrt(ref_sq), 1e-300)
        if off or ratio > norm_tol:
            return (
                f"{where}: {off} of {a.numel()} elements differ beyond float noise (error norm {ratio:.2g} of the "
                f"output's)"
            )
    return ""


def check_problem_job(job: ProblemCheckJob, workdir: Path, device: str, pm=None) -> tuple[ProblemReport, bool]:
    """Run the gates on one problem in this worker. Returns the report and whether the worker is poisoned.

    ``pm`` (default: the process's plugin manager, the worker's own) answers ``kz_check_outputs`` in the
    degeneracy check, so a problem is judged by the output check its candidates meet."""
    import torch

    from kzcore.plugins import get_plugin_manager

    pm = pm or get_plugin_manager()

    problem, config = job.problem, job.config
    t0 = time.perf_counter()
    fields: dict = {"problem": problem.name, "level": problem.level}
    poisoned = False
    path = workdir / f"kz_problem_check_{next(_counter)}.py"
    path.write_text(problem.source)
    try:
        try:
            module = import_module_from_file(path, path.stem)
            size = config.size if config.size != "auto" else ("full" if device == "cuda" else "small")
            fields["size"], _ = sizes.apply_profile(module, size)
            budget = job.max_bytes or int(FREE_FRACTION * free_bytes(device))
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            first, tensor_bytes, changed = _run(module, device, config.seed, config.seed + 1, 1, watch=True)
        except _Failed:
            raise
        except Exception as exc:
            poisoned = is_fatal_device_error(exc)
            raise _Failed("does not run: " + candidate_error(exc, path)) from None
        # what the run needed: the CUDA allocator's peak, or (CPU) the bytes of its tensors
        peak = torch.cuda.max_memory_allocated() if device == "cuda" else tensor_bytes
        if peak > budget:
            raise _Failed(f"needs {peak / 2**30:.2f} GiB, over the {budget / 2**30:.2f} GiB {OVER_BUDGET}")
        fields["ok_runs"] = True
        if changed:  # it runs, so `kz eval` flags it (runner.flagged_problems) and leaves its results out of the scores
            raise _Failed(
                "the reference changes itself while it runs (" + ", ".join(f"`{c}`" for c in changed[:4]) + "): "
                "the evaluator's problem watch would judge every candidate on it hack_suspected"
            )
        again, _, _ = _run(module, device, config.seed, config.seed + 1, 2)
        differ = runs_differ(first, again)
        del again  # at full size each run's outputs are large: keep only those still needed
        if differ:
            raise _Failed(
                f"not deterministic: two runs with the same seed differ (randomness or dropout in forward?): {differ}"
            )
        fields["deterministic"] = True
        if not all(bool(torch.isfinite(o).all()) for o in first if o.is_floating_point() or o.is_complex()):
            raise _Failed("outputs contain NaN or Inf")
        fields["finite"] = True
        other, _, _ = _run(module, device, config.seed, config.seed + 2, 1)
        reasons, stats = degeneracy_reasons(first, other, lambda e, a: check_outputs(pm, e, a, config))
        del other
        try:  # a run that fails here (out of memory beside the outputs kept) leaves the problem unflagged
            nearby, _, _ = _run(module, device, config.seed, config.seed + 1, 1, nudged=True)
            noise, noise_stats = rounding_noise_reasons(first, nearby, config)
            reasons, stats = reasons + noise, stats | noise_stats
        except Exception as exc:
            poisoned = is_fatal_device_error(exc)
            fields["note"] = "no rounding-noise check: " + candidate_error(exc, path)
        fields.update(stats=stats, degenerate=bool(reasons), reason="; ".join(reasons))
    except _Failed as exc:
        fields["reason"] = str(exc)
    except Exception as exc:  # in the checks themselves: still a report, never a dead worker loop
        poisoned = poisoned or is_fatal_device_error(exc)
        fields["reason"] = "check failed: " + candidate_error(exc, path)
        fields["check_failed"] = True  # no verdict: neither passed nor flagged, and not cached
    finally:
        path.unlink(missing_ok=True)
    return ProblemReport(**fields, seconds=round(time.perf_counter() - t0, 4)), poisoned


def failed_report(job: ProblemCheckJob, reason: str) -> ProblemReport:
    return ProblemReport(problem=job.problem.name, level=job.problem.level, reason=reason)


def check_problems(
    problems: list[Problem],
    config: EvalConfig | None = None,
    executor: str = "local",
    workers: int | None = None,
    pool=None,
    pm=None,
    max_bytes: int = PROPOSER_BUDGET,
    on_report: Callable[[ProblemReport], object] | None = None,
) -> list[ProblemReport]:
    """Reports for ``problems`` in their order, each produced in an evaluator worker: through ``pool`` (an
    executor already started, left open) or a new executor of kind ``executor`` (closed afterwards).
    ``max_bytes``: the memory budget (`DEVICE_BUDGET`: a fraction of the device's free memory).
    ``on_report``: called with each problem's final report as soon as it is known (in the order they finish),
    so a caller can file it before the rest are done."""
    from kzcore.executors import open_executor

    config = config or EvalConfig(trials=1)
    jobs = [ProblemCheckJob(problem=p, config=config, max_bytes=max_bytes) for p in problems]
    if pool is not None:
        by_key = _check_all(pool, jobs, on_report)
    else:
        with contextlib.closing(open_executor(executor, workers=workers, config=config, pm=pm)) as own:
            by_key = _check_all(own, jobs, on_report)
    return [by_key.get(p.key) or failed_report(ProblemCheckJob(p, config), "no report came back") for p in problems]


def ran_out_of_memory(report: ProblemReport) -> bool:
    return "outofmemoryerror" in report.reason.lower() or "out of memory" in report.reason.lower()


def crowded_out(job: ProblemCheckJob, report: ProblemReport) -> bool:
    """Whether what other jobs on the device held may have decided this report: the check ran out of device
    memory, or its reference was over a budget taken from the memory free at the time (`DEVICE_BUDGET`)."""
    return ran_out_of_memory(report) or (job.max_bytes == DEVICE_BUDGET and OVER_BUDGET in report.reason)


def _check_all(pool, jobs: list[ProblemCheckJob], on_report=None) -> dict[str, ProblemReport]:
    """Every job through ``pool``; a problem whose check was crowded out by the checks that shared the device
    (`crowded_out`: each within its own budget, together over the card) is checked again alone, one at a time,
    so the report says what the problem needs, not what its neighbours took. ``on_report`` sees each final
    report."""
    by_key, again = {}, []
    jobs_by_key = {j.problem.key: j for j in jobs}
    for report in pool.map(jobs):
        by_key[report.key] = report
        job = jobs_by_key.get(report.key)
        if len(jobs) > 1 and job is not None and crowded_out(job, report):
            again.append(report.key)
        elif on_report is not None:
            on_report(report)
    for job in [j for j in jobs if j.problem.key in again]:
        for report in pool.map([job]):
            by_key[report.key] = report
            if on_report is not None:
                on_report(report)
    return by_key


# ----------------------------------------------------------------------------------------------------
# kz eval: one check per problem, cached
# ----------------------------------------------------------------------------------------------------


def cache_key(problem: Problem, config: EvalConfig, device: str, executor: str = "") -> str:
    """What decides a problem's report: its source, the size it runs at, the device kind, tolerances, seed,
    and the executor kind that produced it (one executor plugin's reports never answer another's checks)."""
    what = {
        "version": CHECK_VERSION,
        "executor": executor,
        "source": problem.source,
        "size": config.size,
        "device": device,
        "atol": config.atol,
        "rtol": config.rtol,
        "seed": config.seed,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def checked_problems(problems: list[Problem], config: EvalConfig, pool, device: str) -> dict[str, ProblemReport]:
    """A report per problem key: from the on-disk cache (``<kz cache>/problem-checks``) or checked now
    through ``pool``, with the budget taken from the device. Reports of checks that did not finish (a
    timeout, a lost worker) are not cached."""
    from kzcore.cache import PROBLEM_CHECKS, cache_dir

    folder = cache_dir(PROBLEM_CHECKS)
    executor = f"{type(pool).__module__}.{type(pool).__qualname__}"
    reports, todo = {}, []
    for p in problems:
        path = folder / f"{cache_key(p, config, device, executor)}.json"
        try:
            reports[p.key] = from_json(ProblemReport, json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            todo.append(p)
    if todo:
        jobs = [ProblemCheckJob(problem=p, config=config, max_bytes=DEVICE_BUDGET) for p in todo]
        fresh = _check_all(pool, jobs)  # a check crowded out by its neighbours is checked again alone
        for p in todo:
            report = fresh.get(p.key) or failed_report(ProblemCheckJob(p, config), "no report came back")
            reports[p.key] = report
            if reached_verdict(report):  # worth keeping
                path = folder / f"{cache_key(p, config, device, executor)}.json"
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(to_json(report)))
                tmp.replace(path)
    return reports


def reached_verdict(report: ProblemReport) -> bool:
    """The reference ran and every check on it ran to the end (passed or not)."""
    return report.ok_runs and not report.check_failed


def unchecked_reason(report: ProblemReport) -> str:
    """Why the check reached no verdict on this problem ("" when it did): its reference did not run (an error,
    over the memory budget), a check on it failed (out of device memory in a comparison) or the check did not
    finish (a timeout, a lost worker). Such a problem is not flagged, so its candidates' results count, but
    nothing says the problem can tell a kernel from no kernel."""
    return "" if reached_verdict(report) else (report.reason or "the problem check reached no verdict")


def degenerate_reason(report: ProblemReport) -> str:
    """Why results on this problem should not count ("" when they should): it ran, but its outputs are
    random, non-finite or degenerate. A problem that did not run (or ran out of budget) is not flagged: its
    candidates' own results say what happened."""
    if not reached_verdict(report) or report.ok:
        return ""
    return report.reason or "the problem check failed"
