"""Default timing: reference and candidate interleaved in one worker with CUDA events; skipped on CPU."""

from __future__ import annotations

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


def time_cuda(reference, candidate, config) -> Timing:
    import torch

    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda") if config.flush_l2 else None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn) -> float:
        if flush is not None:
            flush.zero_()
        start.record()
        fn()
        torch.cuda.synchronize()  # every stream, so work on a side stream is inside the measurement
        end.record()
        end.synchronize()
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
    ref_ms, cand_ms = [], []
    for i in range(reps):
        if i % 2 == 0:  # alternate the order so neither side always runs on a warmer GPU
            ref_ms.append(timed(reference))
            cand_ms.append(timed(candidate))
        else:
            cand_ms.append(timed(candidate))
            ref_ms.append(timed(reference))
    return Timing(
        ref_ms=max(statistics.median(ref_ms), 1e-6),
        cand_ms=max(statistics.median(cand_ms), 1e-6),
        ref_spread=spread(ref_ms),
        cand_spread=spread(cand_ms),
        reps=reps,
        note=note,
    )


@hookimpl(trylast=True)
def kz_time_candidate(device, reference, candidate, config):
    if device == "cuda":
        return time_cuda(reference, candidate, config)
    return Timing(note=CPU_NOTE)
