"""Whose kernels did the GPU work? One forward runs under the torch profiler; each GPU kernel it ran is
attributed to the candidate (its name contains one of the candidate's kernel names, ``kz_kernel_names``),
to memory housekeeping (fills, copies, memsets: what allocation and ``.contiguous()`` do), or to someone
else (ATen, cuBLAS, cuDNN, CuPy, ...). A forward whose GPU time is mostly someone else's did not do the
work itself, whatever route it took around the dispatch guard."""

from __future__ import annotations

import attrs

HOUSEKEEPING = ("fill", "copy", "memset", "memcpy", "arange")  # lower-cased name parts of allowed kernels
FOREIGN_SHARE_LIMIT = 0.10  # more than this share of the forward's GPU time in foreign kernels is flagged
FOREIGN_MIN_US = 10.0  # ... when it is also at least this long (noise-level kernels never decide)


@attrs.frozen
class GpuWork:
    own_us: float
    housekeeping_us: float
    foreign: dict[str, float]  # kernel name -> microseconds

    @property
    def foreign_us(self) -> float:
        return sum(self.foreign.values())

    @property
    def total_us(self) -> float:
        return self.own_us + self.housekeeping_us + self.foreign_us

    @property
    def foreign_share(self) -> float:
        return self.foreign_us / self.total_us if self.total_us else 0.0

    def verdict(self) -> str | None:
        """A hack_suspected message, or None when the candidate's own kernels did the work."""
        if self.foreign_us < FOREIGN_MIN_US or self.foreign_share <= FOREIGN_SHARE_LIMIT:
            return None
        top = sorted(self.foreign.items(), key=lambda kv: -kv[1])[:3]
        names = ", ".join(f"{_short(name)} ({us:.0f} us)" for name, us in top)
        return (
            f"{self.foreign_share:.0%} of the forward's GPU time ran in kernels that are not the candidate's "
            f"own: {names}"
        )


def _short(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def classify(kernels: list[tuple[str, float]], own_names: list[str]) -> GpuWork:
    """Attribute (kernel name, microseconds) pairs."""
    own = housekeeping = 0.0
    foreign: dict[str, float] = {}
    for name, us in kernels:
        if any(n and n in name for n in own_names):
            own += us
        elif any(part in name.lower() for part in HOUSEKEEPING):
            housekeeping += us
        else:
            foreign[name] = foreign.get(name, 0.0) + us
    return GpuWork(own, housekeeping, foreign)


MARKER = "spin_kernel"  # the kernel of torch.cuda._sleep: queued on the calling stream once the forward returns
LEFT_RUNNING_SLACK_US = 2.0  # clock granularity between streams


@attrs.frozen
class GpuEvent:
    """One kernel or memory operation a profiled forward caused: device time, stream, start and end (us)."""

    name: str
    us: float
    stream: int | None = None
    start_us: float | None = None
    end_us: float | None = None


def profile_forward(run) -> list[GpuEvent]:
    """Every GPU kernel and memory operation ``run()`` caused, on any stream, followed by the marker: a
    ``torch.cuda._sleep`` queued on the calling stream right after ``run()`` returned (see `left_running`)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda._sleep(1)
        torch.cuda.synchronize()
    events = []
    for event in prof.events():
        if getattr(event, "device_type", None) != DeviceType.CUDA:
            continue
        us = getattr(event, "device_time", None)
        if us is None:  # older torch
            us = getattr(event, "cuda_time", 0.0)
        span = getattr(event, "time_range", None)
        events.append(
            GpuEvent(
                event.name,
                float(us),
                getattr(event, "device_resource_id", None),
                getattr(span, "start", None),
                getattr(span, "end", None),
            )
        )
    return events


def split_marker(events: list[GpuEvent]) -> tuple[list[GpuEvent], GpuEvent | None]:
    """The forward's own events and the marker (the last-started spin kernel; None when the trace has none)."""
    spins = [e for e in events if MARKER in e.name and e.start_us is not None]
    if not spins:
        return events, None
    marker = max(spins, key=lambda e: e.start_us)
    return [e for e in events if e is not marker], marker


def left_running(events: list[GpuEvent], marker: GpuEvent) -> list[GpuEvent]:
    """The forward's events still running when the marker started. The marker was queued on the calling stream
    after the forward returned, so everything queued on that stream, or on a stream the calling stream waits
    for (a joined side stream), ended before it: what is left is side-stream work nobody waits for, which the
    timer's end event (recorded on the calling stream) cannot see."""
    return [e for e in events if e.end_us is not None and e.end_us > marker.start_us + LEFT_RUNNING_SLACK_US]


def side_stream_verdict(events: list[GpuEvent], marker: GpuEvent | None) -> str | None:
    """A hack_suspected message when the forward left GPU work running on a stream it did not join."""
    if marker is None:
        return None
    late = left_running(events, marker)
    if not late:
        return None
    names = ", ".join(f"{_short(e.name)} ({e.us:.0f} us, stream {e.stream})" for e in late[:3])
    return (
        f"the forward returned with {len(late)} GPU operation(s) still running on a stream the calling stream "
        f"does not wait for ({names}): work the timer cannot see; join side streams before returning "
        "(torch.cuda.current_stream().wait_stream(s))"
    )
