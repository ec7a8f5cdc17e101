"""Default timing: reference and candidate interleaved in one worker with CUDA events; skipped on CPU."""

from __future__ import annotations

import collections
import functools
import statistics
import time

import attrs

from kzcore import hookimpl
from kzcore.errors import TimedCheckFailed
from kzcore.timed import spread
from kzcore.types import Timing

L2_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current GPU's L2 (H200: 60 MB)
CPU_NOTE = "timing skipped: no GPU (timings on a CPU are not performance figures)"


def median_rel_error(samples: list[float]) -> float:
    """Relative standard error of the sample median, from a robust spread (IQR / 1.349 estimates sigma;
    the median's standard error is about 1.2533 sigma / sqrt(n))."""
    if len(samples) < 4:
        return float("inf")
    q1, med, q3 = statistics.quantiles(samples, n=4)
    return 1.2533 * (q3 - q1) / 1.349 / len(samples) ** 0.5 / max(med, 1e-9)


STOP_CHECK_EVERY = 8  # pairs between looks at the stop rule (a round of the default 8 placements)


def interleaved(pair, reps: int, config) -> tuple[list[float], list[float], str]:
    """Up to ``reps`` timed (reference, candidate) pairs, the candidate first in each (``config.timed_order``
    "candidate-first") or alternating which goes first ("alternate"); stops early (after ``config.min_reps``, checked every ``STOP_CHECK_EVERY`` pairs) once both
    medians' relative standard errors are within ``config.timing_precision``; then one more pair, the last,
    which the rounds always check. ``pair(reference_first, last)`` runs one pair and returns its two samples."""
    ref_ms: list[float] = []
    cand_ms: list[float] = []
    min_reps = min(reps, config.min_reps)
    note = ""
    alternate = config.timed_order == "alternate"
    for i in range(max(reps - 1, 0)):
        r, c = pair(alternate and i % 2 == 0, False)
        ref_ms.append(r)
        cand_ms.append(c)
        n = i + 2  # pairs with the last one still to come
        if config.timing_precision and n >= min_reps and n % STOP_CHECK_EVERY == 0 and n < reps:
            if max(median_rel_error(ref_ms), median_rel_error(cand_ms)) <= config.timing_precision:
                note = f"stopped at {n} reps: medians within {config.timing_precision:.1%}"
                break
    r, c = pair(alternate and len(ref_ms) % 2 == 0, True)
    ref_ms.append(r)
    cand_ms.append(c)
    return ref_ms, cand_ms, note


@functools.cache
def spin_cycles_per_us() -> float:
    """How many ``torch.cuda._sleep`` cycles make a microsecond on this GPU, measured once per process (a first
    guess: the clock may change later, so each timed call measures the wait it got and the cover corrects)."""
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


HOST_MARGIN_US = 10.0  # a launch queued just before the start event still needs a few us to reach the GPU
MAX_COVER_US = 20_000.0  # a call the host takes longer than this to queue keeps its host time in its samples
COVER_RAISES = 4  # raises for one call (a forward that waits on the GPU never fits any cover)
RETAKE_BUDGET = 16  # raises of one side's cover per timing when the cover follows recent queueing (window > 0)


@attrs.define
class LaunchCover:
    """The GPU-side wait in front of one side's timed calls. A sample is *covered* when the host had queued the
    whole call before the GPU reached the start event: ``host_us`` (queueing the flush, the wait, the start
    event, the call and the end event) plus a margin is within ``lead_us`` (the flush and the wait, measured on the GPU by
    events). Then the events hold the kernels' GPU time and nothing of the host, however slow the host is
    (a busy CPU, a slow Python launcher, a multi-kernel forward's launches between its kernels). An uncovered
    sample raises the wait and is taken again, up to ``COVER_RAISES`` times for one call, at most to
    ``MAX_COVER_US``; past that it is kept as measured and counted (a forward that synchronizes can never be
    covered).

    ``window`` 0 (the default): the wait only grows, so one slow queueing (a page fault, a descheduled host
    thread) keeps every later call of the timing waiting for it, with the GPU idle. ``window`` N: after each kept
    sample the wait is set to what would have covered the second slowest of the side's last N queueings (never
    under the first wait), so a lone slow queueing costs one retaken call and no later wait, and a host that
    stays slow keeps its longer wait. Raises are then budgeted per timing (``RETAKE_BUDGET``): once it is spent
    the wait stays at the longest asked, as with window 0. A call still uncovered after ``COVER_RAISES`` raises
    (a forward that waits on the GPU: its queueing grows with the wait) sends the wait back to the first one for
    the rest of the timing, since no wait covers it. No rule lets host time into a kept sample without counting
    it: every sample is checked the same way."""

    requested_us: float
    window: int = 0
    raises: int = 0
    retaken: int = 0
    uncovered: int = 0
    host_max_us: float = 0.0
    peak_us: float = 0.0  # the longest wait asked for
    first_us: float = attrs.field(init=False)
    rate: float = 1.0  # GPU wait got per us asked (the cycle calibration's error, from the last sample)
    hopeless: bool = False  # a call no wait covered (window > 0): the first wait from then on, no raises
    _call_raises: int = 0
    _recent: collections.deque = attrs.field(factory=collections.deque)

    def __attrs_post_init__(self) -> None:
        self.first_us = self.peak_us = self.requested_us
        self._recent = collections.deque(maxlen=max(self.window, 1))

    def cycles(self, cycles_per_us: float) -> int:
        return int(self.requested_us * cycles_per_us)

    def covered(self, host_us: float, lead_us: float) -> bool:
        """Whether the sample holds none of the host's time. Always true with ``launch_cover_us = 0``: the
        user turned the wait off, and samples are kept as measured, none taken again."""
        self.host_max_us = max(self.host_max_us, host_us)
        return self.requested_us <= 0 or host_us + HOST_MARGIN_US <= lead_us

    def _fit(self, host_us: float, flush_us: float) -> float:
        """The wait to ask for so a call queued in ``host_us`` is covered, a quarter to spare, clock corrected."""
        needed = (host_us + HOST_MARGIN_US - flush_us) * 1.25 + 20.0  # wait that would have covered, on the GPU
        return min(MAX_COVER_US, needed / max(self.rate, 0.05))

    def _note_rate(self, wait_us: float) -> None:
        if self.requested_us > 0 and wait_us > 0:
            self.rate = wait_us / self.requested_us

    def raise_for(self, host_us: float, flush_us: float, wait_us: float) -> bool:
        """Raise the wait so a call as slow to queue as this one fits, with a quarter to spare; the wait got
        (``wait_us``) against the wait asked for corrects a stale cycle calibration. False when no raise is left."""
        budget = RETAKE_BUDGET if self.window else COVER_RAISES
        if self.hopeless or self.raises >= budget or self.requested_us >= MAX_COVER_US:
            return False
        if self._call_raises >= COVER_RAISES:  # no wait covers this call: its queueing grows with the wait
            if self.window:
                self.hopeless, self.requested_us = True, self.first_us
            return False
        self._note_rate(wait_us)
        self.requested_us = max(self.requested_us * 1.5, self._fit(host_us, flush_us))
        self.requested_us = min(MAX_COVER_US, self.requested_us)
        self.peak_us = max(self.peak_us, self.requested_us)
        self.raises += 1
        self._call_raises += 1
        return True

    def kept(self, host_us: float, flush_us: float, wait_us: float) -> None:
        """After a sample is kept: with a ``window``, the next call's wait from the side's recent queueings."""
        self._call_raises = 0
        if not self.window or self.first_us <= 0 or self.hopeless:
            return
        self._note_rate(wait_us)
        self._recent.append(host_us)
        if self.raises >= RETAKE_BUDGET:  # the budget is spent: the longest wait asked, as with window 0
            self.requested_us = self.peak_us
            return
        ranked = sorted(self._recent)
        second = ranked[-2] if len(ranked) > 1 else ranked[-1]
        self.requested_us = max(self.first_us, self._fit(second, flush_us))
        self.peak_us = max(self.peak_us, self.requested_us)

    def summary(self, side: str) -> str:
        """A timing note: samples that still hold host time, or a cover raised for a slow host (else "")."""
        if self.uncovered:
            return (
                f"{self.uncovered} {side} sample(s) hold host time: queueing a call took up to "
                f"{self.host_max_us:.0f} us, more than a {self.peak_us:.0f} us cover hides (a forward that "
                "waits on the GPU, or a very slow launch path)"
            )
        if self.raises:
            return (
                f"{side} launch cover raised to {self.peak_us:.0f} us (queueing took up to "
                f"{self.host_max_us:.0f} us; {self.retaken} sample(s) taken again)"
            )
        return ""


QUIET_WINDOW = 5  # flushes whose median is one reading of the GPU's memory speed
QUIET_SLACK = 0.05  # a reading within this of the quickest this process has seen is quiet
_quiet_flush_us: dict = {}  # per device: the quickest reading (median of QUIET_WINDOW flushes) seen


def settle(flush_us, budget_ms: float, device=0) -> tuple[float, int, float, float]:
    """Wait for the GPU's memory to be quiet before timing: run ``flush_us`` (one L2 flush, timed by events on
    the GPU, in microseconds: a fixed memory-bound workload) until the median of the last ``QUIET_WINDOW``
    flushes and that of the ``QUIET_WINDOW`` before them are both within ``QUIET_SLACK`` of the quickest such
    median this process has seen on ``device`` (two readings: a falling sequence is not yet quiet), or
    ``budget_ms`` has passed. Medians, not single flushes: the quickest single flush is an outlier (on an H200
    59-62 us against a usual 66 us), and waiting for it runs out the budget. Why wait: another process's
    device-memory traffic slows timed memory-bound kernels (4-13 % on an H200, ``bench/interference_probe.py``),
    and a GPU coming from idle runs its kernels and its flushes slower together for about a second. Returns
    (ms waited, flushes, slowest flush and quickest reading in us)."""
    start = time.perf_counter()
    quickest = _quiet_flush_us.get(device, float("inf"))
    last: list[float] = []
    while True:
        last.append(flush_us())
        if len(last) >= QUIET_WINDOW:
            reading = statistics.median(last[-QUIET_WINDOW:])
            quickest = min(quickest, reading)
            if len(last) >= 2 * QUIET_WINDOW:
                before = statistics.median(last[-2 * QUIET_WINDOW : -QUIET_WINDOW])
                if max(reading, before) <= quickest * (1 + QUIET_SLACK):
                    break
        if (time.perf_counter() - start) * 1000 >= budget_ms:
            break
    if quickest < float("inf"):
        _quiet_flush_us[device] = quickest
    return (time.perf_counter() - start) * 1000, len(last), max(last), quickest


def settle_note(waited_ms: float, flushes: int, slowest: float, quickest: float, budget_ms: float) -> str:
    """A timing note for a `settle` that had to wait ("" when the first two readings were quiet)."""
    if flushes <= 2 * QUIET_WINDOW:
        return ""
    busy = " (still busy: the budget ran out)" if waited_ms >= budget_ms else ""
    return (
        f"waited {waited_ms:.1f} ms for a quiet GPU{busy}: the L2 flush took up to {slowest:.0f} us, "
        f"quietly {quickest:.0f} us"
    )


SPILL_MIN_US = 25.0  # a candidate's calls may end this much later than the reference's after their end event
SPILL_SHARE = 0.10  # ... or this share of its own time, whichever is larger


def spill_verdict(spills: dict[str, list[float]], cand_ms: float) -> str:
    """A message when the candidate's calls left GPU work running past their end event: once the calling
    stream has reached the end event, a device-wide synchronize waits only for work on other streams, so its
    host time (``spills``, us per call and side) holds work on a stream the calling stream does not wait for,
    which the events never saw. The reference's times are the call's own cost; "" when the candidate's median
    is within ``SPILL_MIN_US`` (or ``SPILL_SHARE`` of its time) of the reference's."""
    if not spills.get("reference") or not spills.get("candidate"):
        return ""
    ref, cand = statistics.median(spills["reference"]), statistics.median(spills["candidate"])
    if cand <= ref + max(SPILL_MIN_US, SPILL_SHARE * cand_ms * 1000):
        return ""
    return (
        f"the candidate's timed calls left GPU work running after their end event (median {cand:.0f} us past it, "
        f"the reference's {ref:.0f} us): work on a stream the calling stream does not wait for is not in the "
        "timing; join side streams before returning (torch.cuda.current_stream().wait_stream(s))"
    )


def confirm_spill(run_pass, spills: dict[str, list[float]], rounds=None) -> tuple[list[float], list[float], str, str]:
    """The timed pairs (``run_pass()``: one interleaved pass, returning (reference ms, candidate ms, its stop note)
    and appending each call's spill to ``spills``), judged by `spill_verdict`. One pass's spill can be the host's
    noise: its median is a few dozen microseconds of host time around a synchronize, which a busy host stretches
    (an honest kernel timed beside three other workers can read 60 us against the reference's 25 us). So a pass that spills is followed by a second, run exactly as the first, with new inputs and
    checks: work left on another stream spills in both and is refused (`TimedCheckFailed`); otherwise the slower
    pass for the candidate (the lower speedup) is kept, with ``rounds``' per-placement samples to match, so a
    candidate that spills only in the first pass gains nothing from it. Returns (reference ms, candidate ms,
    stop note, a note on the second pass or "")."""
    ref_ms, cand_ms, stop_note = run_pass()
    first = spill_verdict(spills, statistics.median(cand_ms))
    if not first:
        return ref_ms, cand_ms, stop_note, ""
    past = {side: statistics.median(values) for side, values in spills.items()}
    samples = rounds.set_aside_samples() if rounds is not None else None
    for side in spills.values():
        side.clear()
    ref2, cand2, stop2 = run_pass()
    again = spill_verdict(spills, statistics.median(cand2))
    if again:
        raise TimedCheckFailed(again + " (in two timing passes)")
    speedup = statistics.median(ref_ms) / max(statistics.median(cand_ms), 1e-9)
    speedup2 = statistics.median(ref2) / max(statistics.median(cand2), 1e-9)
    kept = "the second" if speedup2 <= speedup else "the first"
    if speedup2 <= speedup:
        ref_ms, cand_ms, stop_note = ref2, cand2, stop2
    elif rounds is not None and samples is not None:
        rounds.samples = samples
    note = (
        f"timed twice: the first pass's calls seemed to leave GPU work past their end event (median "
        f"{past['candidate']:.0f} us past it, the reference's {past['reference']:.0f} us), the second's did not "
        f"(speedups {speedup:.3f}x and {speedup2:.3f}x; {kept}, the lower, kept)"
    )
    return ref_ms, cand_ms, stop_note, note


def time_cuda(reference, candidate, config, rounds=None) -> Timing:
    """Each timed call: flush L2 (a 256 MB write, ~75 us on an H200), a GPU-side wait (``launch_cover_us`` at
    first), then the start event, the call and the end event, queued back to back on the current stream and
    only then waited for. The host's queueing of the call hides behind the flush and the wait, as the first
    launch does in triton's do_bench, and every sample checks that it did (`LaunchCover`): a call the host took
    longer to queue than the GPU waited is taken again behind a longer wait. So the events hold the kernels' GPU
    time, launches and the gaps between a forward's kernels excluded, as under CUDA-graph replay, whatever the
    host's speed. After each call the end event is waited for, then the whole device: work the call left running
    on another stream shows as a wait in the second (`spill_verdict`). Pairs go through ``rounds``
    (`kzcore.timed.TimedRounds`: new inputs, checked outputs) when given. With ``settle_ms`` > 0 it first
    flushes L2 until the flushes take their quiet time again (`settle`)."""
    import torch

    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda") if config.flush_l2 else None
    lead, flushed, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
    rate = spin_cycles_per_us() if config.launch_cover_us > 0 else 0.0
    covers: dict = {}
    spills: dict[str, list[float]] = {"reference": [], "candidate": []}
    # seconds per phase: where a timing's wall time goes (wait: blocked on the GPU for a timed call; rounds:
    # the rounds' input draws, output copies and checks)
    phases = dict.fromkeys(("settle", "warmup", "pairs", "rounds", "wait"), 0.0)

    def flush_l2() -> None:  # between the lead and flushed events: their gap is the flush's GPU time
        lead.record()
        if flush is not None:
            flush.zero_()
        flushed.record()

    def timed(fn, side: str) -> float:
        cover = covers.setdefault(id(fn), LaunchCover(config.launch_cover_us, window=config.launch_cover_window))
        while True:
            t0 = time.perf_counter()
            flush_l2()
            if cover.requested_us > 0 and rate:
                torch.cuda._sleep(cover.cycles(rate))
            start.record()
            out = fn()
            end.record()  # queued late, it would stretch the sample by the delay: so it counts as the host's too
            queued = time.perf_counter()
            host_us = (queued - t0) * 1e6
            end.synchronize()
            t1 = time.perf_counter()
            torch.cuda.synchronize()  # every stream: nothing of this call runs into the next one
            t2 = time.perf_counter()
            spill_us = (t2 - t1) * 1e6
            phases["wait"] += t2 - queued
            flush_us, wait_us = lead.elapsed_time(flushed) * 1000, flushed.elapsed_time(start) * 1000
            if cover.covered(host_us, flush_us + wait_us):
                break
            if cover.raise_for(host_us, flush_us, wait_us):
                cover.retaken += 1
                del out
                continue
            cover.uncovered += 1
            break
        cover.kept(host_us, flush_us, wait_us)
        spills[side].append(spill_us)
        ms = start.elapsed_time(end)
        if rounds is not None:
            t3 = time.perf_counter()
            rounds.took(side, out, ms)
            phases["rounds"] += time.perf_counter() - t3
        return ms

    def pair(reference_first: bool, last: bool) -> tuple[float, float]:
        t = time.perf_counter()
        if rounds is not None:
            rounds.begin(last=last)
            phases["rounds"] += time.perf_counter() - t
        if reference_first:
            r = timed(reference, "reference")
            c = timed(candidate, "candidate")
        else:
            c = timed(candidate, "candidate")
            r = timed(reference, "reference")
        if rounds is not None:
            t3 = time.perf_counter()
            rounds.end()
            phases["rounds"] += time.perf_counter() - t3
        phases["pairs"] += time.perf_counter() - t
        return r, c

    t = time.perf_counter()
    for _ in range(config.warmup):
        candidate()
        reference()
    torch.cuda.synchronize()
    phases["warmup"] = time.perf_counter() - t
    quiet_note = ""
    if flush is not None and config.settle_ms > 0:

        def flush_us() -> float:
            flush_l2()
            flushed.synchronize()
            return lead.elapsed_time(flushed) * 1000

        waited = settle(flush_us, config.settle_ms, torch.cuda.current_device())
        phases["settle"] = waited[0] / 1000
        quiet_note = settle_note(*waited, config.settle_ms)
    t0 = time.perf_counter()
    first = config.timed_order == "alternate"  # the reference first only where the order alternates
    probe = max(sum(pair(first, False)), (time.perf_counter() - t0) * 1000)  # new inputs and checks included
    reps, note = config.reps, ""
    if probe * config.reps > config.max_timing_s * 1000:
        reps = max(10, int(config.max_timing_s * 1000 / probe))
        note = f"reps cut to {reps} to fit max_timing_s={config.max_timing_s:g}"
    if reference is candidate:  # the identity check: one callable's spill is its own
        ref_ms, cand_ms, stop_note = interleaved(pair, reps, config)
        spill_note = ""
    else:
        ref_ms, cand_ms, stop_note, spill_note = confirm_spill(lambda: interleaved(pair, reps, config), spills, rounds)
    ref_cover, cand_cover = covers[id(reference)], covers[id(candidate)]
    if ref_cover is cand_cover:  # one callable timed against itself (the identity check)
        cover_notes = (ref_cover.summary("reference and candidate"),)
    else:
        cover_notes = (ref_cover.summary("reference"), cand_cover.summary("candidate"))
    note = "; ".join(x for x in (quiet_note, note, stop_note, spill_note, *cover_notes) if x)
    return Timing(
        ref_ms=max(statistics.median(ref_ms), 1e-6),
        cand_ms=max(statistics.median(cand_ms), 1e-6),
        ref_spread=spread(ref_ms),
        cand_spread=spread(cand_ms),
        reps=len(ref_ms),
        note=note,
        phases={name: round(seconds, 6) for name, seconds in phases.items()},
    )


CPU_PAIRS = 2  # checked pairs run untimed on a CPU, so the timed path's checks hold there too


def untimed_pairs(reference, candidate, rounds) -> None:
    """On a CPU: the timed path's pairs without the timing, each checked (the last as the last), the candidate
    first as in the timed pairs."""
    for i in range(CPU_PAIRS):
        rounds.begin(last=i == CPU_PAIRS - 1, check=True)
        rounds.took("candidate", candidate())
        rounds.took("reference", reference())
        rounds.end()


@hookimpl(trylast=True)
def kz_time_candidate(device, reference, candidate, config, rounds):
    if device == "cuda":
        return time_cuda(reference, candidate, config, rounds)
    if rounds is not None:
        untimed_pairs(reference, candidate, rounds)
    return Timing(note=CPU_NOTE)
