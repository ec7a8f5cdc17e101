"""Checking problem modules themselves, in evaluator workers (the module is untrusted when a Proposer
wrote it): it constructs and runs, twice identically, with finite and non-degenerate outputs.

Worker side: `check_problem_job`; parent side: `check_problems` (through any executor)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from kzcore.evaluate.degeneracy import degeneracy_reasons
from kzcore.evaluate.pipeline import as_list, candidate_error, clone_inputs, is_fatal_device_error
from kzcore.problems import apply_size_profile, import_module_from_file
from kzcore.types import EvalConfig, Problem, ProblemCheckJob, ProblemReport

_counter = itertools.count()


class _Failed(Exception):
    pass


def _run(module, device: str, seed_init: int, seed_inputs: int, seed_forward: int):
    """(outputs, bytes of its tensors) of a fresh model (weights from ``seed_init``) on inputs from ``seed_inputs``; the RNG is
    re-seeded with ``seed_forward`` just before forward, so randomness inside forward shows up as a
    difference between two runs that differ only in that seed."""
    import torch

    with torch.device(device):
        torch.manual_seed(seed_init)
        init = list(module.get_init_inputs())
        torch.manual_seed(seed_init)
        model = module.Model(*init)
        torch.manual_seed(seed_inputs)
        inputs = list(module.get_inputs())
    torch.manual_seed(seed_forward)
    with torch.no_grad():
        outputs = as_list(model(*clone_inputs(inputs)))
    if device == "cuda":
        torch.cuda.synchronize()
    bad = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
    if bad:
        raise _Failed(f"forward returned {', '.join(bad)}; outputs must be tensors")
    tensors = [*model.parameters(), *model.buffers(), *(x for x in inputs if isinstance(x, torch.Tensor)), *outputs]
    return outputs, sum(t.numel() * t.element_size() for t in tensors)


def check_problem_job(job: ProblemCheckJob, workdir: Path, device: str) -> tuple[ProblemReport, bool]:
    """Run the gates on one problem in this worker. Returns the report and whether the worker is poisoned."""
    import torch

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
            fields["size"] = apply_size_profile(module, size)
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            first, tensor_bytes = _run(module, device, config.seed, config.seed + 1, 1)
        except _Failed:
            raise
        except Exception as exc:
            poisoned = is_fatal_device_error(exc)
            raise _Failed("does not run: " + candidate_error(exc, path)) from None
        # what the run needed: the CUDA allocator's peak, or (CPU) the bytes of its tensors
        peak = torch.cuda.max_memory_allocated() if device == "cuda" else tensor_bytes
        if peak > job.max_bytes:
            raise _Failed(f"needs {peak / 2**30:.2f} GiB, over the {job.max_bytes / 2**30:.2f} GiB memory budget")
        fields["ok_runs"] = True
        again, _ = _run(module, device, config.seed, config.seed + 1, 2)
        if not all(
            a.shape == b.shape and torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) for a, b in zip(first, again)
        ):
            raise _Failed("not deterministic: two runs with the same seed differ (randomness or dropout in forward?)")
        fields["deterministic"] = True
        if not all(bool(torch.isfinite(o).all()) for o in first if o.is_floating_point() or o.is_complex()):
            raise _Failed("outputs contain NaN or Inf")
        fields["finite"] = True
        other, _ = _run(module, device, config.seed, config.seed + 2, 1)
        reasons, stats = degeneracy_reasons(first, other, config)
        fields.update(stats=stats, degenerate=bool(reasons), reason="; ".join(reasons))
    except _Failed as exc:
        fields["reason"] = str(exc)
    except Exception as exc:  # in the checks themselves: still a report, never a dead worker loop
        poisoned = poisoned or is_fatal_device_error(exc)
        fields["reason"] = "check failed: " + candidate_error(exc, path)
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
) -> list[ProblemReport]:
    """Reports for ``problems`` in their order, each produced in an evaluator worker: through ``pool`` (an
    executor already started, left open) or a new executor of kind ``executor`` (closed afterwards)."""
    from kzcore.plugins import executors, get_plugin_manager, plugin_specs

    config = config or EvalConfig(trials=1)
    jobs = [ProblemCheckJob(problem=p, config=config) for p in problems]
    if pool is not None:
        by_key = {r.key: r for r in pool.map(jobs)}
    else:
        pm = pm or get_plugin_manager()
        own = executors(pm).get(executor)(workers=workers, config=config, plugins=plugin_specs(pm))
        try:
            by_key = {r.key: r for r in own.map(jobs)}
        finally:
            own.close()
    return [by_key.get(p.key) or failed_report(ProblemCheckJob(p, config), "no report came back") for p in problems]
