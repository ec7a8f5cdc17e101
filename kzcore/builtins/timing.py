"""Default timing: reference and candidate interleaved in one worker with CUDA events; skipped on CPU."""

from __future__ import annotations

import functools
import statistics

from kzcore import hookimpl
from kzcore.types import Timing

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2 (H200: 60 MB)
CPU_NOTE = "timing skipped: no GPU (timings on a CPU are not performance figures)"


def spread(samples: list[float]) -> float:
    """Interquartile range over median: a robust relative spread."""
    if len(samples) < 4:
        return 0.0
    q1, _q2, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / statistics.median(samples)


def median_rel_error(samples: list[float]) -> float:
    """Relative standard error of the sample median, from a robust spread (IQR / 1.349 estimates sigma;
    the median's standard error is about 1.2533 sigma / sqrt(n))."""
    if len(samples) < 4:
        return float("inf")
    q1, med, q3 = statistics.quantiles(samples, n=4)
    return 1.2533 * (q3 - q1) / 1.349 / len(samples) ** 0.5 / max(med, 1e-9)


def interleaved(timed, reference, candidate, reps: int, config) -> tuple[list[float], list[float], str]:
    """Up to ``reps`` timed (reference, candidate) pairs, alternating which goes first so neither always
    runs on a warmer GPU; stops early (after ``config.min_reps``, checked every 10 pairs) once both medians'
    relative standard errors are within ``config.timing_precision``."""
    ref_ms: list[float] = []
    cand_ms: list[float] = []
    min_reps = min(reps, config.min_reps)
    for i in range(reps):
        if i % 2 == 0:
            ref_ms.append(timed(reference))
            cand_ms.append(timed(candidate))
        else:
            cand_ms.append(timed(candidate))
            ref_ms.append(timed(reference))
        n = i + 1
        if config.timing_precision and n >= min_reps and n % 10 == 0 and n < reps:
            if max(median_rel_error(ref_ms), median_rel_error(cand_ms)) <= config.timing_precision:
                return ref_ms, cand_ms, f"stopped at {n} reps: medians within {config.timing_precision:.1%}"
    return ref_ms, cand_ms, ""


@functools.cache
def spin_cycles_per_us() -> float:
    """How many ``torch.cuda._sleep`` cycles make a microsecond on this GPU, measured once per process."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 200_000
    torch.cuda._sleep(cycles)  # first call: module load
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / max(start.elapsed_time(end) * 1000.0, 1e-3)


def time_cuda(reference, candidate, config) -> Timing:
    """Each timed call: flush L2 (a 256 MB write, ~75 us on an H200), a GPU-side wait of
    ``launch_cover_us``, then the start event, the call and the end event, queued back to back on the
    current stream and only then waited for. The host's launch latency hides behind the flush and the wait,
    as in triton's do_bench, so the events measure the kernels' GPU time and nothing of the host's round trip.
    Work the call leaves running on another stream is outside the events: the GPU-work stage refuses it."""
    import torch

    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda") if config.flush_l2 else None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cover = int(config.launch_cover_us * spin_cycles_per_us()) if config.launch_cover_us > 0 else 0

    def timed(fn) -> float:
        if flush is not None:
            flush.zero_()
        if cover:
            torch.cuda._sleep(cover)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()  # every stream: nothing of this call runs into the next one
        return start.elapsed_time(end)

    for _ in range(config.warmup):
        reference()
        candidate()
    torch.cuda.synchronize()
    probe = timed(reference) + timed(candidate)
    reps, note = config.reps, ""
    if probe * config.reps > config.max_timing_s * 1000:
        reps = max(10, int(config.max_timing_s * 1000 / probe))
        note = f"reps cut to {reps} to fit max_timing_s={config.max_timing_s:g}"
    ref_ms, cand_ms, stop_note = interleaved(timed, reference, candidate, reps, config)
    note = "; ".join(x for x in (note, stop_note) if x)
    return Timing(
        ref_ms=max(statistics.median(ref_ms), 1e-6),
        cand_ms=max(statistics.median(cand_ms), 1e-6),
        ref_spread=spread(ref_ms),
        cand_spread=spread(cand_ms),
        reps=len(ref_ms),
        note=note,
    )


@hookimpl(trylast=True)
def kz_time_candidate(device, reference, candidate, config):
    if device == "cuda":
        return time_cuda(reference, candidate, config)
    return Timing(note=CPU_NOTE)
