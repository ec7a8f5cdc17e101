"""Ground truth for the evaluator's speedups (``bench/timing.py --ground-truth``): for each kernel, the speedup
``kz eval`` files (through a worker pool, with 1 and with 4 workers per GPU) next to the speedup measured in
this process, with the same modules and inputs, by triton's ``do_bench`` (median; L2 flushed each call),
``do_bench_cudagraph`` (median of graph replays; no flush, so it reads L2-warm on inputs that fit in L2) and a
flushed graph replay (`_flushed_graph_ms`: L2-cold like do_bench, with no launch in it like graph replay).

Kernels: the built-in Triton solutions at full size (level 1 and the level-2 GEMM and conv fusions) and
memory-bound ones at sizes chosen for 15-100 us (``MID``) and tiny ones (the ``small`` profile, a few us),
which stay in the record but outside the targets (below ``MIN_US``).

Each of the three is measured over as many placements of the inputs as the evaluator's timer uses
(``EvalConfig.timing_placements``, kzcore/evaluate/placement.py: a kernel's speed can depend on the memory
its inputs were given), both sides on the same placement each time, and the mean per side kept.

A kernel's truth (`truth_for`) is do_bench, unless the host takes longer to queue a call than the GPU takes to
flush and run it: then do_bench times the host, and the flushed graph replay is the truth.

Targets: |kz / truth - 1| <= 5 % for every kernel of >= 20 us (median over runs), speedup CV
<= 2 % over 5 runs with 4 workers per GPU while the other workers compile (TRITON_ALWAYS_COMPILE=1), and the
self-reference ratio (bench/timing.py's section) within 1.00 +- 0.02.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from pathlib import Path

TARGET_REL = 0.05
HOST_MARGIN_US = 10.0  # as the evaluator's timer: a launch queued just in time still needs a few us
TARGET_CV = 0.02
HOST_JITTER = 2.0  # the host's iteration time counts twice in `truth_for` (it varies within a run)
TRUTH_RULE = "2026-12-03: the host's iteration time counts HOST_JITTER (2) times"
MIN_US = 20.0  # kernels faster than this are recorded, not held to the targets
# memory-bound kernels at sizes between the `small` profile (a few us) and full size (0.2-1 ms)
MID = {
    "1_ReLU": {"batch_size": 2048, "dim": 8192},
    "3_Sigmoid": {"batch_size": 1024, "dim": 8192},
    "6_MulAdd": {"batch_size": 1024, "dim": 8192},
    "11_Softmax": {"batch_size": 4096, "dim": 4096},
    "13_LayerNorm": {"batch_size": 2048, "dim": 8192},
    "8_MeanReduction": {"batch_size": 4096, "dim": 8192},
    "14_RMSNorm": {"batch_size": 1024, "dim": 8192},
}
SMALL = ("1_ReLU", "11_Softmax")
FULL = (
    "1_ReLU,2_GELU,4_LeakyReLU,5_Softplus,6_MulAdd,8_MeanReduction,11_Softmax,12_LogSoftmax,13_LayerNorm,"
    "14_RMSNorm,16_Cumsum,17_CrossEntropyLoss,18_L1NormRows,19_Matmul,20_MatmulTransposedB,21_BatchedMatmul,"
    "22_MatVec,23_Linear,25_MaxPool2d,26_AvgPool2d,1_Gemm_BiasAdd_ReLU,7_Gemm_Softmax,8_Conv2d_ReLU_BiasAdd"
)


def cases(problems: dict, solutions: dict, full: str = FULL, device: str = "cuda") -> list[dict]:
    """(label, Problem, size profile) for every kernel; a MID size is a KZ_SIZES profile added to the source.
    On a CPU (the smoke run: the Triton interpreter) every named problem runs at its ``small`` size only."""
    import attrs

    out = []
    if device != "cuda":
        names = [n for n in full.split(",") if n in problems and n in solutions]
        return [{"label": f"{n}@small", "problem": problems[n], "size": "small", "name": n} for n in names]
    for name in full.split(","):
        if name in problems and name in solutions:
            out.append({"label": f"{name}@full", "problem": problems[name], "size": "full", "name": name})
    for name, sizes in MID.items():
        if name in problems and name in solutions:
            source = problems[name].source + f"\nKZ_SIZES = {{**KZ_SIZES, 'gt_mid': {sizes!r}}}\n"
            problem = attrs.evolve(problems[name], source=source, path=None)
            out.append({"label": f"{name}@mid", "problem": problem, "size": "gt_mid", "name": name})
    for name in SMALL:
        if name in problems and name in solutions:
            out.append({"label": f"{name}@small", "problem": problems[name], "size": "small", "name": name})
    return out


def _modules(case: dict, solution_source: str, workdir: Path) -> tuple:
    """The case's problem module (at its size) and solution module, imported from files in ``workdir``."""
    from kzcore.evaluate.sizes import apply_profile
    from kzcore.problems import import_module_from_file

    tag = case["label"].replace("@", "_").replace("-", "_")
    problem_file = workdir / f"gt_problem_{tag}.py"
    problem_file.write_text(case["problem"].source)
    solution_file = workdir / f"gt_solution_{tag}.py"
    solution_file.write_text(solution_source)
    problem = import_module_from_file(problem_file, f"gt_problem_{tag}")
    apply_profile(problem, case["size"])
    return problem, import_module_from_file(solution_file, f"gt_solution_{tag}")


def _models(problem, solution) -> tuple:
    """The reference and the candidate, built from the same seeded init inputs (call on the target device)."""
    import torch

    torch.manual_seed(0)
    init = list(problem.get_init_inputs())
    torch.manual_seed(0)
    reference = problem.Model(*init)
    torch.manual_seed(0)
    return reference, solution.ModelNew(*init)


def _wall_ms(fn, reps: int = 5) -> float:
    """Median wall-clock milliseconds of ``fn`` (the CPU smoke run's stand-in for do_bench)."""
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def _pair_ms(reference, candidate, inputs: list, device: str) -> tuple[float, float]:
    """do_bench medians (L2 flushed) of reference and candidate on ``inputs`` after one warm call each; on a CPU
    (the smoke run) wall-clock medians."""
    ref, cand = functools.partial(reference, *inputs), functools.partial(candidate, *inputs)
    if device != "cuda":
        return _wall_ms(ref), _wall_ms(cand)
    import torch
    from triton.testing import do_bench

    ref(), cand()
    torch.cuda.synchronize()
    return do_bench(ref, return_mode="median"), do_bench(cand, return_mode="median")


def placements(case: dict, solution_source: str, device: str, workdir: Path, count: int) -> dict:
    """do_bench (median, L2 flushed) of reference and candidate on ``count`` separate allocations of the same
    inputs in this one process (kzcore.evaluate.placement.Placements: all made first and kept alive, so each
    lands on other memory). Separates "the kernel's speed depends on where its inputs lie"
    from "it depends on the process" when the pool's runs disagree (22_MatVec's candidate can read
    0.489-0.568 ms from one worker process to the next while its reference varies < 0.6 %)."""
    import torch

    from kzcore.evaluate.placement import Placements

    problem, solution = _modules(case, solution_source, workdir)
    rows = []
    with torch.device(device), torch.no_grad():
        reference, candidate = _models(problem, solution)
        torch.manual_seed(1)
        for inputs in Placements(list(problem.get_inputs()), count):
            ref_ms, cand_ms = _pair_ms(reference, candidate, inputs, device)
            first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
            rows.append({"ref_ms": ref_ms, "cand_ms": cand_ms, "address": None if first is None else first.data_ptr()})
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "count": count,
        "sets": rows,
        "ref_cv": cv([r["ref_ms"] for r in rows]),
        "cand_cv": cv([r["cand_ms"] for r in rows]),
        "speedup_cv": cv([r["ref_ms"] / r["cand_ms"] for r in rows]),
    }


def _host_us(fn, reps: int = 21) -> float:
    """Median microseconds the host takes to queue one call of ``fn`` (the GPU idle before each)."""
    import torch

    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(samples)


def _iteration_host_us(fn, reps: int = 21) -> float:
    """Median microseconds the host takes to queue one iteration of do_bench's loop around ``fn``: its flush,
    start event, the call and end event. While the GPU's flush and kernel take longer, do_bench's host keeps
    ahead and every launch is hidden; when they take less, the GPU waits for the host and do_bench times it."""
    import torch
    from triton import runtime

    cache = runtime.driver.active.get_empty_cache_for_benchmark()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def iteration():
        runtime.driver.active.clear_cache(cache)
        start.record()
        fn()
        end.record()

    return _host_us(iteration, reps)


def _flush_us(reps: int = 11) -> float:
    """Median GPU microseconds of do_bench's own L2 flush: the time a call's launch can hide behind."""
    import torch
    from triton import runtime

    cache = runtime.driver.active.get_empty_cache_for_benchmark()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        start.record()
        runtime.driver.active.clear_cache(cache)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000)
    return statistics.median(samples)


def _flushed_graph_ms(fn, calls: int = 10, replays: int = 25) -> float:
    """Milliseconds of one call of ``fn`` under CUDA-graph replay with an L2 flush (do_bench's 256 MB write) in
    front of every call inside the graph, less a graph of the flushes alone: L2-cold as do_bench, and no launch
    or host gap in it at all, however slow the host. Independent of the evaluator's timer (no events around a
    call, no GPU-side wait)."""
    import torch

    flush = torch.empty(64 << 20, dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # first calls outside the capture (allocator blocks, lazy handles)
        fn()
        flush.zero_()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    both, alone = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(both):
        for _ in range(calls):
            flush.zero_()
            fn()
    with torch.cuda.graph(alone):
        for _ in range(calls):
            flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def replay(graph) -> float:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    with_calls, flushes = [], []
    for _ in range(replays):
        with_calls.append(replay(both))
        flushes.append(replay(alone))
    del both, alone
    return max(statistics.median(with_calls) - statistics.median(flushes), 1e-6) / calls


def _one_process(cases_and_sources: list, device: str, workdir: str, within: int = 0) -> dict:
    """In a fresh process (spawned: its own CUDA context, its own allocations): do_bench (median, L2 flushed;
    wall-clock medians on a CPU) of every case's reference and candidate, the SM clock when NVML answers, and
    with ``within`` > 0 the same on that many more allocations in this process (`placements`): the spread
    within one process beside the spread from one process to the next."""
    import torch

    out = {"pid": os.getpid(), "rows": {}}
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # as the evaluator's workers run the reference
        torch.backends.cudnn.allow_tf32 = False
    for case, source in cases_and_sources:
        problem, solution = _modules(case, source, Path(workdir))
        with torch.device(device), torch.no_grad():
            reference, candidate = _models(problem, solution)
            torch.manual_seed(1)
            inputs = list(problem.get_inputs())
            row = dict(zip(("ref_ms", "cand_ms"), _pair_ms(reference, candidate, inputs, device)))
            if device == "cuda":
                try:
                    row["sm_clock_mhz"] = torch.cuda.clock_rate()
                except Exception:  # no NVML binding here
                    row["sm_clock_mhz"] = None
        del inputs, reference, candidate
        if device == "cuda":
            torch.cuda.empty_cache()
        if within:
            row["placements"] = placements(case, source, device, Path(workdir), within)
        out["rows"][case["label"]] = row
    return out


def processes(cases_and_sources: list, device: str, workdir: Path, count: int, within: int = 3) -> dict:
    """do_bench of the named kernels in ``count`` fresh processes, one after another: label -> the per-process
    times and their CVs. Tells whether a kernel's speed belongs to the process it runs in (its CUDA context,
    the memory it is given) for every timer, or only for the evaluator's (22_MatVec's candidate can read
    0.485-0.545 ms from one evaluator worker to the next, its reference < 1 % apart)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    runs = []
    for _ in range(count):
        with context.Pool(1) as pool:  # a new process each time
            runs.append(pool.apply(_one_process, (cases_and_sources, device, str(workdir), within)))
    out = {}
    for case, _source in cases_and_sources:
        label = case["label"]
        sets = [{"pid": r["pid"], **r["rows"][label]} for r in runs]
        out[label] = {
            "count": count,
            "sets": sets,
            "ref_cv": cv([x["ref_ms"] for x in sets]),
            "cand_cv": cv([x["cand_ms"] for x in sets]),
            "speedup_cv": cv([x["ref_ms"] / x["cand_ms"] for x in sets]),
            "cand_cv_within": [x["placements"]["cand_cv"] for x in sets if "placements" in x],
        }
    return out


def _timers(count: int) -> tuple:
    """(name, ms of one call of fn) for the three ground-truth timers, their budgets shared among ``count``
    placements (do_bench's defaults: 25 ms warm-up, 100 ms of repetitions)."""
    from triton.testing import do_bench, do_bench_cudagraph

    warmup, rep = max(5, 25 // count), max(20, 100 // count)
    return (
        ("flushed_graph", lambda fn: _flushed_graph_ms(fn, replays=max(5, 25 // count))),
        ("do_bench", lambda fn: do_bench(fn, warmup=warmup, rep=rep, return_mode="median")),
        ("cudagraph", lambda fn: do_bench_cudagraph(fn, rep=rep, return_mode="median")),
    )


def direct(
    case: dict, solution_source: str, device: str, workdir: Path, count: int = 1, shift_mib: float = 0.0
) -> dict:
    """do_bench, do_bench_cudagraph and the flushed graph replay (GPU), or wall-clock medians (CPU smoke), of
    reference and candidate on ``count`` placements of the inputs (kzcore.evaluate.placement, as the
    evaluator's timer spreads its repetitions; both sides on the same placement each time, their budgets
    shared among the placements): per timer, the mean of the per-placement figures, those kept beside it."""
    import torch

    from kzcore.evaluate.placement import placements_for

    problem, solution = _modules(case, solution_source, workdir)
    out: dict = {}
    with torch.device(device), torch.no_grad():
        reference, candidate = _models(problem, solution)
        torch.manual_seed(1)
        inputs = list(problem.get_inputs())
        (placements,) = placements_for(count, shift_mib, device, inputs)
        count = len(placements)
        per: dict[str, list] = {}
        timers = _timers(count) if device == "cuda" else ()
        for j, placed in enumerate(placements):
            ref, cand = functools.partial(reference, *placed), functools.partial(candidate, *placed)
            if device != "cuda":
                per.setdefault("do_bench", []).append((_wall_ms(ref), _wall_ms(cand)))
                continue
            ref(), cand()
            torch.cuda.synchronize()
            if j == 0:
                out["host_us"] = {"ref": _host_us(ref), "cand": _host_us(cand)}
                out["iteration_host_us"] = {"ref": _iteration_host_us(ref), "cand": _iteration_host_us(cand)}
                out["flush_us"] = _flush_us()
            for key, timer in timers:
                if key in out:  # failed on an earlier placement
                    continue
                try:
                    per.setdefault(key, []).append((timer(ref), timer(cand)))
                except Exception as exc:  # a forward a CUDA graph cannot capture: recorded, not fatal
                    out[key] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        for key, pairs in per.items():
            if key in out:
                continue
            ref_ms = statistics.mean(r for r, _ in pairs)
            cand_ms = statistics.mean(c for _, c in pairs)
            out[key] = {"ref_ms": ref_ms, "cand_ms": cand_ms, "speedup": ref_ms / cand_ms}
            if len(pairs) > 1:
                out[key]["placements"] = [{"ref_ms": r, "cand_ms": c} for r, c in pairs]
            if device != "cuda":
                out[key]["wall"] = True
        out["placements"] = count
        del inputs
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def through_pool(bench, case_list: list[dict], workers_per_gpu: int, runs: int, compile_always: bool) -> dict:
    """Every case evaluated ``runs`` times through one pool of ``workers_per_gpu`` workers; label -> results."""
    import attrs

    from kzcore.executors.local import LocalPool
    from kzcore.types import Candidate, EvalJob

    before = os.environ.get("TRITON_ALWAYS_COMPILE")
    if compile_always:
        os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # every job compiles its kernels while others time theirs
    config = attrs.evolve(bench.config, workers_per_gpu=workers_per_gpu)
    pool = LocalPool(config=config, plugins=["kz_triton", *bench.timer_specs])
    try:  # started inside: an interrupt (bench/timing.py's SIGTERM) at any point still closes the pool
        t0 = time.perf_counter()
        pool.start()
        start_s = time.perf_counter() - t0
        jobs = []
        for run in range(runs):
            for case in case_list:
                name = case["name"]
                cand = Candidate(problem=name, language="triton", level=case["problem"].level, sample=run,
                                 source=bench.solutions[name].source, origin=case["label"])  # fmt: skip
                jobs.append(EvalJob(case["problem"], cand, attrs.evolve(config, size=case["size"])))
        t1, started = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M:%S")
        results, done_s = [], {}
        for result in pool.map(jobs):  # when each job ended: set beside a GPU-state log (nvidia-smi's timestamps)
            results.append(result)
            done_s[(result.origin, result.sample)] = round(time.perf_counter() - t1, 2)
        wall = time.perf_counter() - t1
    finally:
        pool.close()
        if before is None:
            os.environ.pop("TRITON_ALWAYS_COMPILE", None)
        else:
            os.environ["TRITON_ALWAYS_COMPILE"] = before
    by_label: dict[str, list] = {}
    for result in sorted(results, key=lambda r: r.sample):  # results come as they finish, not in job order
        by_label.setdefault(result.origin, []).append(result)
    return {"pool_start_s": round(start_s, 2), "wall_s": round(wall, 2), "started": started, "by_label": by_label,
            "done_s": done_s}  # fmt: skip


def cv(values: list[float | None]) -> float | None:
    """Coefficient of variation of the values that are not None (None for fewer than two)."""
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.mean(values)


class Measured:
    """What a ground-truth run has measured so far, filled phase by phase: the direct measurements (label ->
    `direct`'s dict, kernel by kernel), the placements and the fresh processes when asked for, each pool's
    results. `section` assembles the report's ground-truth section from whatever is there, so that a run cut
    short (a time limit's SIGTERM, an error) still writes what it finished: bench/timing.py passes
    ``on_phase``, which writes the report after every phase."""

    def __init__(self, on_phase=None):
        self.cases: list[dict] = []
        self.truth: dict = {}
        self.placed: dict = {}
        self.spread: dict = {}
        self.pools: dict = {}  # workers per GPU -> `through_pool`'s result
        self.phases_done: list[str] = []
        self.on_phase = on_phase
        self.t0 = time.perf_counter()

    def done(self, phase: str) -> None:
        """``phase`` finished: named in ``phases_done``, then ``on_phase(phase)`` (the checkpoint)."""
        self.phases_done.append(phase)
        if self.on_phase is not None:
            self.on_phase(phase)

    def section(self) -> dict:
        """The ground-truth section of the report: one judged row per kernel measured directly so far, with
        the pools finished so far, and the targets over those rows."""
        rows = [self.row(case) for case in self.cases if case["label"] in self.truth]
        return {
            **summary(rows, [f"{k}w" for k in self.pools]),
            "pools": {f"{k}w": {x: v[x] for x in ("pool_start_s", "wall_s", "started")} for k, v in self.pools.items()},
            "rows": rows,
            "wall_s": round(time.perf_counter() - self.t0, 2),
        }

    def row(self, case: dict) -> dict:
        """One kernel's row: its direct measurements, placements and processes when measured, and one entry
        per finished pool (`_pool_entry`), judged (`judge`)."""
        label = case["label"]
        t = self.truth[label]
        db, cg = t.get("do_bench", {}), t.get("cudagraph", {})
        row = {"kernel": label, "size": case["size"], "do_bench": db, "cudagraph": cg, "error": t.get("error")}
        row["flushed_graph"] = t.get("flushed_graph", {})
        if label in self.placed:
            row["placements"] = self.placed[label]
        if label in self.spread:
            row["processes"] = self.spread[label]
        row.update({k: t.get(k) for k in ("host_us", "iteration_host_us", "flush_us")})  # judged in `judge`
        for per_gpu, pool in self.pools.items():
            row[f"kz_{per_gpu}w"] = _pool_entry(pool, label, row)
        return judge(row)


VERSUS = (("vs_do_bench", "do_bench"), ("vs_flushed_graph", "flushed_graph"), ("vs_cudagraph", "cudagraph"))


def _pool_entry(pool: dict, label: str, row: dict) -> dict:
    """A kernel's results through one pool (`through_pool`): statuses, speedups and their median and CV, and
    the median against each direct measurement of ``row``."""
    results = pool["by_label"].get(label, [])
    speedups = [r.speedup for r in results]
    ok_speedups = [s for s in speedups if s is not None]
    med = statistics.median(ok_speedups) if ok_speedups else None
    entry = {
        "statuses": sorted({r.status.value for r in results}),
        "speedups": speedups,
        "speedup_median": med,
        "speedup_cv": cv(speedups) if None not in speedups else None,
        "ref_ms": [r.ref_ms for r in results],
        "cand_ms": [r.cand_ms for r in results],
        "messages": sorted({r.message[:160] for r in results if r.message}),
        "notes": sorted({(r.timing_note or "")[:160] for r in results if r.timing_note}),
        "placement_ms": [r.placement_ms for r in results],
        "done_s": [pool["done_s"].get((r.origin, r.sample)) for r in results],
    }
    for key, timer in VERSUS:
        if med is not None and row[timer].get("speedup"):
            entry[key] = med / row[timer]["speedup"]
    return entry


def ground_truth(bench, args, measured: Measured | None = None) -> dict:
    """The whole ground-truth section: direct measurements, then placements and processes when asked for,
    then the pools; per-kernel rows and targets. ``measured`` (bench/timing.py's) is filled as it goes and
    told when each phase is done: "direct", "placements", "processes", "pool_1w", "pool_4w"."""
    measured = measured if measured is not None else Measured()
    if args.device == "cuda":  # as the evaluator's workers run the reference (EvalConfig.tf32 = False)
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    measured.cases = cases(bench.problems, bench.solutions, args.gt_problems or FULL, args.device)
    from bench.report import scratch_dir

    workdir = Path(scratch_dir("kz-ground-truth-"))
    _measure_direct(bench, args, measured, workdir)
    measured.done("direct")
    if getattr(args, "gt_placements", 0):
        _measure_placements(bench, args, measured, workdir)
        measured.done("placements")
    if getattr(args, "gt_processes", 0):
        _measure_processes(bench, args, measured, workdir)
        measured.done("processes")
    for per_gpu, runs in ((1, args.gt_runs_1), (4, args.gt_runs_4)):
        if runs:
            pool = measured.pools[per_gpu] = through_pool(bench, measured.cases, per_gpu, runs, per_gpu > 1)
            print(f"pool {per_gpu} worker(s)/GPU: {runs} runs in {pool['wall_s']} s", file=sys.stderr)
            measured.done(f"pool_{per_gpu}w")
    section = measured.section()
    for row in section["rows"]:
        print(_line(row), file=sys.stderr)
    return section


def _measure_direct(bench, args, measured: Measured, workdir: Path) -> None:
    """`direct` of every kernel, into ``measured.truth`` one kernel at a time (a failure is the row's error)."""
    for case in measured.cases:
        try:
            measured.truth[case["label"]] = direct(
                case,
                bench.solutions[case["name"]].source,
                args.device,
                workdir,
                bench.config.timing_placements,
                bench.config.placement_shift_mib,
            )
        except Exception as exc:
            measured.truth[case["label"]] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        d = measured.truth[case["label"]].get("do_bench", {})
        print(f"truth {case['label']:28s} do_bench ref {d.get('ref_ms')} cand {d.get('cand_ms')}", file=sys.stderr)


def _measure_placements(bench, args, measured: Measured, workdir: Path) -> None:
    """`placements` of every kernel on ``--gt-placements`` allocations, into ``measured.placed``."""
    for case in measured.cases:
        try:
            measured.placed[case["label"]] = placements(
                case, bench.solutions[case["name"]].source, args.device, workdir, args.gt_placements
            )
        except Exception as exc:  # out of memory for several copies of a large input: recorded, not fatal
            measured.placed[case["label"]] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        p = measured.placed[case["label"]]
        print(f"placements {case['label']:28s} cand cv {p.get('cand_cv')} ref cv {p.get('ref_cv')}", file=sys.stderr)


def _measure_processes(bench, args, measured: Measured, workdir: Path) -> None:
    """`processes` for the ``--gt-process-kernels`` of this run, into ``measured.spread``; a named label that
    is not a kernel of this run is said, not silently skipped."""
    named = set(args.gt_process_kernels.split(","))
    chosen = [(c, bench.solutions[c["name"]].source) for c in measured.cases if c["label"] in named]
    unknown = sorted(named - {c["label"] for c, _ in chosen})
    if unknown:
        print(f"--gt-process-kernels: not kernels of this run, skipped: {', '.join(unknown)}", file=sys.stderr)
    measured.spread = processes(chosen, args.device, workdir, args.gt_processes) if chosen else {}
    for label, p in measured.spread.items():
        within = ", ".join(f"{x:.4f}" for x in p["cand_cv_within"] if x is not None)
        print(
            f"processes {label:28s} cand cv {p['cand_cv']} ref cv {p['ref_cv']} (cand cv within each: {within})",
            file=sys.stderr,
        )


def judge(row: dict) -> dict:
    """A row's truth (`truth_for`, from its recorded measurements), its size against ``MIN_US`` and each
    pool's median speedup against the truth; the same on a live run and on a recorded one (`rederive`)."""
    row.update(truth_for(row))
    ms = row.get(row["truth"], {})
    us = 1000 * min(ms["ref_ms"], ms["cand_ms"]) if "ref_ms" in ms else None
    row["min_us"] = us
    row["held_to_targets"] = us is not None and us >= MIN_US
    for key in ("kz_1w", "kz_4w"):
        entry = row.get(key)
        if entry is None:
            continue
        entry.pop("vs_truth", None)
        if entry.get("speedup_median") is not None and ms.get("speedup"):
            entry["vs_truth"] = entry["speedup_median"] / ms["speedup"]
    return row


def rederive(report: dict) -> dict:
    """A recorded ground-truth report judged again by this file's rules (`judge`, `summary`) from its own
    measurements; nothing is measured. For a rule refined after a run: the record keeps what was measured,
    and this says what the refined rule makes of it (with ``rederived`` naming the rule's version)."""
    gt = report["ground_truth"]
    rows = [judge(row) for row in gt["rows"]]
    pools = [k for k in ("1w", "4w") if any(f"kz_{k}" in r for r in rows)]
    return {**gt, **summary(rows, pools), "rederived": TRUTH_RULE}


SLOW_PLACEMENT = 0.02  # a placement whose both medians are this far above its job's quickest reads slow
JOB_START = 3  # its first placements: the start of a job's timing


def slow_placements(jobs_per_kernel: list[list]) -> dict:
    """Over each kernel's jobs (an evaluation's ``placement_ms``: per placement [ref_ms, cand_ms]): how many
    placements were timed, how many read slow on *both* sides (each over ``SLOW_PLACEMENT`` above the job's
    quickest on that side: the GPU, not the kernel's pages, was slow), and how many of those came among a
    job's first ``JOB_START`` placements. On an H200 these fell from 48 to 5 per run once the timer waited
    for a quiet GPU (settle_ms); 40 of the 48 among the first 3 of a job."""
    timed = slow = at_start = 0
    for jobs in jobs_per_kernel:
        for job in jobs:
            if not job:
                continue
            quickest = [min(p[side] for p in job) for side in (0, 1)]
            for i, pair in enumerate(job):
                timed += 1
                if all(pair[side] > quickest[side] * (1 + SLOW_PLACEMENT) for side in (0, 1)):
                    slow += 1
                    at_start += i < JOB_START
    return {"placements_timed": timed, "slow_placements": slow, "slow_at_job_start": at_start}


def summary(rows: list[dict], pools: list[str]) -> dict:
    """The targets over the rows held to them: per pool the worst deviation from the truth and from do_bench,
    the worst CV, and whether every target holds."""
    held = [r for r in rows if r["held_to_targets"]]
    worst = {}
    hidden = [r for r in held if r["truth"] == "do_bench"]  # rows where do_bench's flush hides the host
    for pool in pools:
        key = f"kz_{pool}"
        devs = [abs(r[key].get("vs_truth", float("inf")) - 1.0) for r in held]
        db_devs = [abs(r[key].get("vs_do_bench", float("inf")) - 1.0) for r in hidden]
        cvs = [r[key]["speedup_cv"] for r in held]
        worst[pool] = {
            "max_dev_vs_truth": max(devs) if devs else None,
            "max_dev_vs_do_bench": max(db_devs) if db_devs else None,
            "max_speedup_cv": max((c for c in cvs if c is not None), default=None),
            "cv_missing": sum(c is None for c in cvs),
            "within_5pct": sum(d <= TARGET_REL for d in devs),
            **slow_placements([r[key].get("placement_ms") or [] for r in held]),
        }
    ok = bool(held) and all(
        worst[k]["max_dev_vs_truth"] is not None and worst[k]["max_dev_vs_truth"] <= TARGET_REL for k in worst
    )
    four = worst.get("4w")
    ok_cv = (
        four is not None
        and four["max_speedup_cv"] is not None
        and four["max_speedup_cv"] <= TARGET_CV
        and not four["cv_missing"]
    )
    return {
        "kernels": len(rows),
        "held_to_targets": len(held),
        "min_us": MIN_US,
        "targets": {"rel": TARGET_REL, "cv_4_workers": TARGET_CV},
        "worst": worst,
        "ok_vs_truth": ok,
        "ok_cv": ok_cv,
        "do_bench_times_the_host": [
            {"kernel": r["kernel"], "iteration_host_us": r["iteration_host_us"], "flush_us": r["flush_us"]}
            for r in rows if r["truth"] != "do_bench"
        ],
    }  # fmt: skip


def truth_for(measured: dict) -> dict:
    """Which direct measurement is a kernel's ground truth: do_bench (median, L2 flushed) when the host keeps
    ahead of it, as the issue's target assumes; else the flushed graph replay (`_flushed_graph_ms`), which never
    waits on the host. do_bench queues flush, events and call back to back without waiting; when the host takes
    longer to queue one such iteration (`_iteration_host_us`) than the GPU takes to flush and run the call, the
    GPU waits for the host and do_bench times the host (on an H200 VM whose host took ~100 us to queue a Triton
    launch, 1_ReLU@mid read 0.76x under do_bench and 1.00x under graph replay). The iteration is timed once, on
    an idle GPU, and the host's speed varies during a run: it counts ``HOST_JITTER`` times (8_MeanReduction@mid's
    candidate iteration once took the host 84 us when measured and 140-150 us during two of do_bench's
    placements, going by what do_bench read there)."""
    host, flush_us, graph = (
        measured.get("iteration_host_us"),
        measured.get("flush_us"),
        measured.get("flushed_graph", {}),
    )
    fields = {"host_us": measured.get("host_us"), "iteration_host_us": host, "flush_us": flush_us, "truth": "do_bench"}
    if host and flush_us and "speedup" in graph:
        gpu_us = {"ref": 1000 * graph["ref_ms"], "cand": 1000 * graph["cand_ms"]}
        if any(HOST_JITTER * host[side] + HOST_MARGIN_US > flush_us + gpu_us[side] for side in ("ref", "cand")):
            fields["truth"] = "flushed_graph"
    return fields


def _line(row: dict) -> str:
    db = row["do_bench"].get("speedup")
    cg = row["cudagraph"].get("speedup")
    fg = row.get("flushed_graph", {}).get("speedup")
    parts = [
        f"{row['kernel']:28s}",
        f"min {row['min_us'] or 0:8.1f} us",
        f"do_bench {db or 0:6.3f}x",
        f"graph {cg or 0:6.3f}x",
        f"flushed graph {fg or 0:6.3f}x",
        f"truth {row.get('truth', '-')}",
    ]
    for key in ("kz_1w", "kz_4w"):
        if key in row:
            e = row[key]
            parts.append(
                f"{key} {e['speedup_median'] or 0:6.3f}x ({(e.get('vs_truth') or 0):.3f}, cv {100 * (e['speedup_cv'] or 0):.2f}%)"
            )
    return "  ".join(parts)  # fmt: skip
