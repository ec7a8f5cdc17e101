"""Whose kernels did the GPU work? One forward runs under the torch profiler; each GPU kernel it ran is
attributed to the candidate, to memory housekeeping (fills, copies, memsets: what allocation and
``.contiguous()`` do), or to someone else (ATen, cuBLAS, cuDNN, CuPy, ...). A forward whose GPU time is mostly
someone else's did not do the work itself, whatever route it took around the dispatch guard.

A kernel is the candidate's by origin, not by a likeness of names: its traced name, reduced to the kernel's
qualified identifier (no return type, template arguments or parameter list: `kernel_identifier`), must equal
one of the candidate's kernel names (``kz_kernel_names``) exactly, and no more such kernels count as its own
than its launch counter saw launches during the profiled forward. So a kernel named like a part of a
library's (``gemm``, ``softmax``, ``e``) claims nothing, and a library kernel whose name the candidate copied
for one of its own is still counted as foreign beyond the candidate's own launches."""

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


def _demangled(name: str) -> str:
    """The qualified name in an Itanium-mangled symbol (``_Z11relu_kernelPKfPfi`` -> ``relu_kernel``,
    ``_ZN2ns6kernelEv`` -> ``ns::kernel``); other names unchanged."""
    if not name.startswith("_Z"):
        return name
    rest, parts = name[2:], []
    nested = rest.startswith("N")
    rest = rest[1:] if nested else rest
    while rest and rest[0].isdigit():
        digits = len(rest) - len(rest.lstrip("0123456789"))
        length = int(rest[:digits])
        parts.append(rest[digits : digits + length])
        rest = rest[digits + length :]
        if not nested:
            break
    return "::".join(parts) if parts else name


def kernel_identifier(name: str) -> str:
    """A traced kernel name reduced to its qualified identifier: ``void ns::k<128>(float*, int)`` -> ``ns::k``,
    a mangled ``_Z...`` symbol likewise; a plain name (Triton's, an ``extern "C"`` kernel's) stays as it is."""
    name = _demangled(name.strip()).replace("(anonymous namespace)", "{anonymous}")
    cut = len(name)
    for mark in ("(", "<"):
        at = name.find(mark)
        if at > 0:
            cut = min(cut, at)
    head = name[:cut].strip()
    return head.rsplit(" ", 1)[-1] if " " in head else head


def classify(kernels: list[tuple[str, float]], own_names: list[str], own_launches: int | None = None) -> GpuWork:
    """Attribute (kernel name, microseconds) pairs. ``own_launches``: how many launches the candidate's
    instrumentation counted in the profiled forward (None: no count); beyond it, kernels with the candidate's
    names are someone else's (the longest of them, to be safe)."""
    names = {n for n in own_names if n}
    own_events: list[tuple[str, float]] = []
    housekeeping = 0.0
    foreign: dict[str, float] = {}
    for name, us in kernels:
        if kernel_identifier(name) in names:
            own_events.append((name, us))
        elif any(part in name.lower() for part in HOUSEKEEPING):
            housekeeping += us
        else:
            foreign[name] = foreign.get(name, 0.0) + us
    if own_launches is not None and len(own_events) > own_launches:
        own_events.sort(key=lambda e: e[1])
        for name, us in own_events[own_launches:]:
            key = f"{name} (beyond the candidate's {own_launches} launch(es))"
            foreign[key] = foreign.get(key, 0.0) + us
        own_events = own_events[:own_launches]
    return GpuWork(sum(us for _, us in own_events), housekeeping, foreign)


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
