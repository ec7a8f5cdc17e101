"""GPU-only behaviour: full-size evaluation with timing, NaN-poisoning of the CUDA cache, and recovery from
an illegal memory access. Run on the GPU machine through scripts/gpu-check."""

from __future__ import annotations

from pathlib import Path

import pytest

from kz_suites import BUILTIN_SUITE
from kzcore.evaluate.runner import evaluate
from kzcore.problems import load_problems, load_solutions
from kzcore.types import Candidate, EvalConfig, Status

pytestmark = pytest.mark.gpu
ADVERSARIAL = Path(__file__).parent / "adversarial"


def _candidate(name: str, problem: str = "1_ReLU") -> Candidate:
    source = (ADVERSARIAL / f"{name}.py").read_text()
    return Candidate(problem=problem, language="triton", level=1, sample=0, source=source, origin=name)


def test_poison_fills_freed_blocks_without_growing_the_cache():
    import torch

    from kzcore.evaluate.memory import poison_free_cache

    x = torch.ones(1 << 24, device="cuda")
    del x
    reserved = torch.cuda.memory_reserved()
    for _ in range(5):
        poison_free_cache()
    assert torch.cuda.memory_reserved() <= reserved
    y = torch.empty(1 << 24, device="cuda")
    assert torch.isnan(y).all(), "a fresh torch.empty block must read NaN after poisoning"


def test_reserve_leaves_a_block_that_outputs_the_size_of_the_inputs_take_without_cudamalloc():
    """A precompile's compile-only forward runs outside the GPU lock: what it allocates must come from the
    cache `memory.reserve` filled under the lock, or its cudaMalloc would slow another worker's timing."""
    import torch

    from kzcore.evaluate.memory import reserve

    torch.cuda.init()  # reserve does nothing in a process whose CUDA is not initialised (it never starts CUDA)
    torch.cuda.empty_cache()
    n = 256 << 20
    reserve(n)
    reserved = torch.cuda.memory_reserved()
    assert reserved >= n
    out = torch.empty(n, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_reserved() == reserved
    del out
    halves = [torch.empty(n // 2, dtype=torch.uint8, device="cuda") for _ in range(2)]  # split from the block
    assert torch.cuda.memory_reserved() == reserved and len(halves) == 2


def test_poison_reaches_blocks_freed_on_a_side_stream_and_small_blocks():
    import torch

    from kzcore.evaluate.memory import poison_free_cache

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        a = torch.ones(1 << 22, device="cuda")
    small = torch.ones(1000, device="cuda")
    torch.cuda.synchronize()
    del a, small
    poison_free_cache()
    with torch.cuda.stream(side):
        b = torch.empty(1 << 22, device="cuda")
        assert torch.isnan(b).all(), "a block cached on a side stream must be poisoned too"
    c = torch.empty(1000, device="cuda")
    assert torch.isnan(c).all(), "a small-pool block must be poisoned too"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64", "float32"])
def test_poisoned_blocks_read_nan_in_every_float_dtype(dtype):
    import torch

    from kzcore.evaluate.memory import poison_free_cache

    x = torch.ones(1 << 22, device="cuda")
    del x
    poison_free_cache()
    y = torch.empty(1 << 22, dtype=getattr(torch, dtype), device="cuda")
    assert torch.isnan(y).all(), f"a poisoned block must read NaN as {dtype}"


def test_poisoning_many_small_blocks_is_fast():
    import time

    import torch

    from kzcore.evaluate.memory import free_blocks, poison_free_cache

    keep = [torch.ones(n * 128 + 1, device="cuda") for n in range(1, 2001)]
    del keep[::2]  # 1000 free holes between live blocks
    torch.cuda.synchronize()
    assert len(free_blocks()) >= 500
    reserved = torch.cuda.memory_reserved()
    t = time.perf_counter()
    poison_free_cache()
    seconds = time.perf_counter() - t
    assert torch.cuda.memory_reserved() <= reserved
    assert seconds < 0.2, f"poisoning {len(free_blocks())} free blocks took {seconds:.3f} s"


def test_full_size_reference_solutions_are_correct_and_timed(plugins, tmp_path):
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "11_Softmax", "19_Matmul")]
    results = evaluate(
        problems, load_solutions("builtin", problems, "triton"), EvalConfig(), tmp_path / "r.jsonl", pm=pm
    )
    assert len(results) == 3
    for r in results:
        assert r.status is Status.CORRECT, r.message
        assert r.size == "full" and r.device == "cuda"
        assert r.speedup and r.ref_ms and r.cand_ms and r.timing_reps >= EvalConfig().min_reps
        # the timer's phases are parts of its stage: the pairs hold the GPU waits and the rounds' work
        parts = {name: r.stages[f"timing.{name}"] for name in ("settle", "warmup", "pairs", "rounds", "wait")}
        assert parts["wait"] + parts["rounds"] <= parts["pairs"] + 1e-5 <= r.stages["timing"] + 2e-5, (r.problem, parts)
        assert parts["settle"] + parts["warmup"] + parts["pairs"] <= r.stages["timing"] + 1e-5, (r.problem, parts)
        assert r.spot_checked == r.timing_reps + 1, r  # every pair, the probe pair included


def test_full_size_problem_checks_pass_in_one_worker_and_are_cached(tmp_path, monkeypatch):
    """At full size a problem check leaves more than memory.KEEP_CACHED cached, so its worker gives the memory
    back before it reports; that step once raised on a problem check's report and killed the worker, so each
    such check was filed as a crash, the problem left unflagged and its report never cached."""
    from kzcore.evaluate.problem_check import checked_problems
    from kzcore.executors.local import LocalPool

    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "cache"))
    names = ("1_ReLU", "11_Softmax", "13_LayerNorm", "19_Matmul")
    problems = [p for p in load_problems("builtin:1") if p.name in names]
    pool = LocalPool(workers=1, config=EvalConfig(), plugins=["kz_triton"])
    try:
        pool.start()
        reports = checked_problems(problems, EvalConfig(), pool, "cuda")
        assert all(r.ok and r.size == "full" for r in reports.values()), {k: r.reason for k, r in reports.items()}
        assert pool.replaced == 0  # the one worker checked all four and is still the same
    finally:
        pool.close()

    def refuse(jobs):
        raise AssertionError(f"checked again: {[j.problem.key for j in jobs]}")

    monkeypatch.setattr(pool, "map", refuse)  # every report was cached: asked again, none is checked
    assert checked_problems(problems, EvalConfig(), pool, "cuda") == reports


def test_partial_write_reads_poison_not_stale_reference(plugins, tmp_path):
    pm = plugins("kz_triton")
    problems = load_problems("builtin:1")
    (r,) = evaluate(problems, [_candidate("half_output")], EvalConfig(), tmp_path / "r.jsonl", pm=pm)
    assert r.status is Status.INCORRECT
    assert "NaN" in r.message or "outside" in r.message


def test_illegal_memory_access_replaces_the_worker(plugins, tmp_path):
    pm = plugins("kz_triton")
    problems = load_problems("builtin:1")
    good = load_solutions("builtin", [p for p in problems if p.name == "1_ReLU"], "triton")[0]
    good = Candidate(problem=good.problem, language="triton", level=1, sample=1, source=good.source)
    results = evaluate(problems, [_candidate("oob_write"), good], EvalConfig(), tmp_path / "r.jsonl", workers=1, pm=pm)
    by_sample = {r.sample: r for r in results}
    assert by_sample[0].status is Status.RUNTIME_ERROR
    assert by_sample[1].status is Status.CORRECT, by_sample[1].message


def test_an_idle_worker_gives_back_the_memory_a_large_problem_took(plugins, tmp_path):
    """A worker keeps at most memory.KEEP_CACHED of the device cached between jobs (several workers and a
    trainer share one GPU: on an H200 idle workers held 8-20 GB each, and a training run beside them ran out of
    memory)."""
    import torch

    from kzcore.evaluate.memory import KEEP_CACHED
    from kzcore.executors.local import LocalPool

    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "6_MulAdd"]  # 3 GiB of inputs at full size
    candidates = load_solutions("builtin", problems, "triton")
    free_before, _ = torch.cuda.mem_get_info()
    pool = LocalPool(workers=1, config=EvalConfig(), plugins=["kz_triton"])
    try:
        pool.start()
        idle, _ = torch.cuda.mem_get_info()
        results = evaluate(problems, candidates, EvalConfig(), tmp_path / "r.jsonl", executor=pool, pm=pm)
        assert results[0].status is Status.CORRECT, results[0].message
        after, _ = torch.cuda.mem_get_info()
        # the job needed several GiB (inputs, clones, outputs); the idle worker holds at most KEEP_CACHED more
        assert idle - after <= KEEP_CACHED + (512 << 20), (free_before, idle, after)
    finally:
        pool.close()


def test_several_workers_per_gpu_share_it_behind_the_lock(plugins, tmp_path):
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "2_GELU", "3_Sigmoid", "11_Softmax")]
    config = EvalConfig(workers_per_gpu=2)
    results = evaluate(problems, load_solutions("builtin", problems, "triton"), config, tmp_path / "r.jsonl", pm=pm)
    assert [r.status for r in results] == [Status.CORRECT] * 4, [r.message for r in results]
    # memory-bound elementwise kernels: ours and eager both stream at bandwidth, so timing done alone reads ~1.0
    relu = next(r for r in results if r.problem == "1_ReLU")
    assert 0.8 < relu.speedup < 1.25, relu.speedup


def test_a_pool_times_only_once_another_run_lets_go_of_the_gpu(plugins, tmp_path, monkeypatch):
    """Another run's hold on the GPU (taken here through the host-wide lock, as that run's worker would take
    it) keeps this pool's worker waiting; once it lets go the candidate is evaluated and timed, its wait
    booked as lock wait, not against its deadline. The pool names the lock's file (a GPU UUID in its name)."""
    import threading
    import time

    from kzcore.executors.devicelock import HOST_LOCKS, HostLock
    from kzcore.executors.local import LocalPool

    monkeypatch.setenv(HOST_LOCKS, str(tmp_path / "locks"))
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "1_ReLU"]
    config = EvalConfig(timeout_s=20)
    pool = LocalPool(workers=1, config=config, plugins=["kz_triton"])
    where = pool.host_locks["0"]
    assert where.startswith(str(tmp_path / "locks" / "gpu-")) and "index" not in where, where
    gone = threading.Lock()

    def let_go():
        if gone.acquire(blocking=False):
            other_run()

    try:
        pool.start()
        other_run = HostLock(where.removesuffix(".lock")).acquire(0, exclusive=True)
        assert other_run is not None
        timer = threading.Timer(30.0, let_go)  # longer than the job's own timeout: a wait is not charged
        timer.start()
        t0 = time.monotonic()
        results = evaluate(problems, load_solutions("builtin", problems, "triton"), config, tmp_path / "r.jsonl",
                           executor=pool, pm=pm)  # fmt: skip
        waited = time.monotonic() - t0
    finally:
        timer.cancel()
        let_go()
        pool.close()
    (result,) = results
    assert result.status is Status.CORRECT and result.speedup > 0, result.message
    assert waited >= 29 and result.stages.get("lock.shared_wait", 0) + result.stages.get("lock.exclusive_wait", 0) > 0
    assert pool.info["gpu_locks"] == {"0": where}


def test_triton_precompile_compiles_without_launching(tmp_path):
    import shutil

    import torch

    from kz_triton.runtime import _jit_functions, instrument, load_module, precompile

    root = BUILTIN_SUITE / "solutions" / "triton"
    shutil.copy(root / "level1" / "11_Softmax.py", tmp_path / "kz_candidate_precompile.py")
    module = load_module(tmp_path / "kz_candidate_precompile.py")
    launches = instrument(module)
    model = module.ModelNew().cuda()
    x = torch.randn(512, 1000, device="cuda")
    device = torch.cuda.current_device()

    def compiled() -> int:
        return sum(len(fn.device_caches[device][0]) for fn, _ in _jit_functions(module))

    assert compiled() == 0
    assert precompile(model, [x]) is True
    assert launches() == 0, "a precompile must not count (or make) launches"
    n = compiled()
    assert n >= 1
    out = model(x)
    torch.cuda.synchronize()
    assert launches() >= 1
    assert compiled() == n, "the real launch must find its kernel already compiled"
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


def test_work_done_in_cublas_behind_a_pre_run_hook_is_hack_suspected(plugins, tmp_path):
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "19_Matmul"]
    cand = _candidate("prerun_hook_matmul", problem="19_Matmul")
    (result,) = evaluate(problems, [cand], EvalConfig(trials=2), tmp_path / "r.jsonl", pm=pm)
    assert result.status is Status.HACK_SUSPECTED, result.message
    # the op guard stays on in launch callbacks; the GPU-work profile would refuse it next
    assert "aten.mm" in result.message or "not the candidate's own" in result.message


# -- timing fidelity and work left on side streams ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["torch", "non-blocking"])
def test_side_stream_work_is_inside_the_measurement_or_refused(kind):
    """The timer records its end event on the calling stream right after the call. Work a forward leaves running
    on a side stream must then either be inside the measurement (the calling stream waits for it: the legacy
    default stream waits for blocking streams) or be refused by the gpu-work stage (it was still running when
    the marker queued after the forward started). A torch stream and a non-blocking stream (CuPy's, through
    torch.cuda.ExternalStream) are both tried."""
    import torch

    from kzcore.builtins.timing import time_cuda
    from kzcore.evaluate.gpuwork import profile_forward, side_stream_verdict, split_marker

    if kind == "torch":
        side = torch.cuda.Stream()
    else:
        cupy = pytest.importorskip("cupy")
        raw = cupy.cuda.Stream(non_blocking=True)
        side = torch.cuda.ExternalStream(raw.ptr)
    a = torch.randn(4096, 4096, device="cuda")

    def unjoined():  # ~10 ms of GPU work on the side stream; the host returns long before it ends
        with torch.cuda.stream(side):
            out = a
            for _ in range(4):
                out = out @ a
            return out

    def joined():
        out = unjoined()
        torch.cuda.current_stream().wait_stream(side)
        return out

    joined()  # first use of the side stream (cuBLAS handle, allocator blocks) outside the measurements
    torch.cuda.synchronize()
    config = EvalConfig(device="cuda", reps=20, min_reps=20)
    honest = time_cuda(joined, joined, config).ref_ms
    measured = time_cuda(unjoined, unjoined, config).ref_ms
    events, marker = split_marker(profile_forward(unjoined))
    assert marker is not None, "the marker kernel (torch.cuda._sleep) must be in the trace"
    refused = side_stream_verdict(events, marker) is not None
    inside = measured >= 0.9 * honest
    assert inside or refused, (kind, measured, honest, events)
    assert inside != refused, "either the timer sees the work or the check refuses it, not both"
    events, marker = split_marker(profile_forward(joined))
    assert side_stream_verdict(events, marker) is None, events  # joined work is never refused
    events, marker = split_marker(profile_forward(lambda: a @ a))
    assert marker is not None and side_stream_verdict(events, marker) is None, events


def test_time_cuda_agrees_with_triton_do_bench_and_with_itself():
    import attrs
    import torch
    from triton.testing import do_bench, do_bench_cudagraph

    from kzcore.builtins.timing import time_cuda

    x = torch.randn(1 << 26, device="cuda")  # 256 MiB: ~0.2 ms to read and write on an H200
    small = torch.randn(1 << 23, device="cuda")  # 32 MiB, ~20 us: launch latency would show if it were timed

    def big():
        return x * 2.0

    def tiny():
        return small * 2.0

    config = EvalConfig(device="cuda")
    same = time_cuda(big, big, config)
    assert abs(same.speedup - 1.0) <= 0.02, same
    ours, theirs = time_cuda(big, big, config).ref_ms, do_bench(big, return_mode="median")
    assert abs(ours / theirs - 1.0) <= 0.05, (ours, theirs)
    # a ~17 us kernel: the launch is hidden as under CUDA-graph replay, not added as with a sync per call. A
    # timed launch would add >= 5 us (a sync per call 10-15 us); the events themselves may differ from graph
    # replay by ~2 us (on an H200: 19.1 vs 17.0 us), so the bound is 10 % or 3 us
    with torch.cuda.stream(torch.cuda.Stream()):  # graphs capture on a side stream
        replayed = do_bench_cudagraph(tiny, return_mode="median")
    warm = attrs.evolve(config, flush_l2=False)  # graph replay does not flush L2 either
    ours = time_cuda(tiny, tiny, warm).ref_ms
    assert abs(ours - replayed) <= max(0.10 * replayed, 0.003), (ours, replayed)


def _busy_us(us: float) -> None:
    import time

    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def test_a_slow_host_is_not_timed_however_slow_its_launches_are():
    """A forward whose host path takes 400 us before its ~20 us kernel (a slow Python launcher, a busy CPU), and
    one that spends 60 us of host time between each of its 5 kernels, both time as their kernels' GPU time (the
    same kernels queued by a fast host under CUDA-graph replay): the cover in front of each timed call grows until
    the host has queued the whole call before the start event fires. A fixed 100 us wait would let the host's
    excess into every sample (Triton candidates read 5-12 % slow in some worker processes that way)."""
    import attrs
    import torch
    from triton.testing import do_bench_cudagraph

    from kzcore.builtins.timing import time_cuda

    x = torch.randn(1 << 23, device="cuda")  # 32 MiB

    def fast():
        return x * 2.0

    def slow():
        _busy_us(400)
        return x * 2.0

    def five():
        y = x
        for _ in range(5):
            y = y * 1.0001
        return y

    def gappy():
        y = x
        for _ in range(5):
            _busy_us(60)
            y = y * 1.0001
        return y

    config = attrs.evolve(EvalConfig(device="cuda"), flush_l2=False)  # graph replay does not flush L2 either
    with torch.cuda.stream(torch.cuda.Stream()):  # graphs capture on a side stream
        one, many = do_bench_cudagraph(fast, return_mode="median"), do_bench_cudagraph(five, return_mode="median")
    for fn, truth in ((slow, one), (gappy, many)):
        timing = time_cuda(fn, fast, config)
        assert abs(timing.ref_ms - truth) <= max(0.10 * truth, 0.003), (fn.__name__, timing, truth)
        assert "launch cover raised" in timing.note and "hold host time" not in timing.note, timing.note


def test_a_forward_that_waits_on_the_gpu_is_timed_without_hanging_and_says_so():
    """A forward that synchronizes can never be queued ahead of the GPU: the timer raises its cover a few times,
    then keeps the samples as measured (they hold the host's wait) and says so in the note."""
    import time

    import torch

    from kzcore.builtins.timing import time_cuda

    x = torch.randn(1 << 23, device="cuda")

    def syncing():
        y = x * 2.0
        torch.cuda.synchronize()
        return y

    t0 = time.perf_counter()
    timing = time_cuda(syncing, lambda: x * 2.0, EvalConfig(device="cuda", reps=30, min_reps=30))
    assert time.perf_counter() - t0 < 30
    assert timing.ref_ms and timing.ref_ms > timing.cand_ms, timing
    assert "reference sample(s) hold host time" in timing.note, timing.note


def test_a_candidate_is_timed_on_each_placement_and_their_mean_is_kept(plugins, tmp_path):
    """22_MatVec at full size on 4 placements of its 2 GiB input (its Triton candidate runs 0.48 or 0.55 ms by the
    allocation on an H200): the result keeps each placement's medians, their mean as its timing,
    and names the spread in its note exactly when the placements differ by more than 2 %."""
    pm = plugins("kz_triton")
    problems = [p for p in load_problems("builtin:1") if p.name == "22_MatVec"]
    config = EvalConfig(timing_placements=4)
    (r,) = evaluate(problems, load_solutions("builtin", problems, "triton"), config, tmp_path / "r.jsonl", pm=pm)
    assert r.status is Status.CORRECT, r.message
    assert len(r.placement_ms) == 4 and r.timing_reps >= config.min_reps
    ref = [p[0] for p in r.placement_ms]
    cand = [p[1] for p in r.placement_ms]
    assert r.ref_ms == pytest.approx(sum(ref) / 4) and r.cand_ms == pytest.approx(sum(cand) / 4)
    assert ("candidate's time depends on where its inputs lie" in r.timing_note) == (max(cand) > 1.02 * min(cand))
