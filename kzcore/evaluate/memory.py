"""Poisoning the CUDA caching allocator's free memory before a candidate runs, so an output the candidate
leaves partly unwritten (``torch.empty`` + a partial kernel) reads NaN, never stale results.

Every free byte is set to 0xFF: NaN in every floating dtype (fp64/32/16, bf16, fp8) and -1 in signed integers.

How: the allocator hands a request for exactly a free block's size, on the block's stream, that block (best
fit), so the poison asks for each free block in turn, fills it, and holds it until every block is done. Two
rules of PyTorch's allocator shape this: requests up to 1 MiB are served from the small pool and larger ones
from the large pool, so a small-pool block over 1 MiB (a whole free 2 MiB segment) is taken in 1 MiB pieces
over a few rounds; and a large-pool block of 1 MiB or less is never handed out, so it is left alone. An
allocation that lands outside the segments that existed at the start is a new segment (nothing cached fit):
it is released with ``empty_cache`` while the poisoned blocks are still held, so the cache never grows. Cost:
one ``memory_snapshot`` per round and one fill per block — no per-block statistics calls (those cost 0.3 ms
each and made this step 0.36 s per evaluation on an H200)."""

from __future__ import annotations

import bisect
import contextlib

SMALL_REQUEST_MAX = 1 << 20  # the allocator's small-pool limit (kSmallSize)
KEEP_CACHED = 4 << 30  # between jobs a worker keeps at most this much device memory cached (``release_cache``)
MIN_BLOCK = 512  # the allocator's rounding unit (kMinBlockSize)
ROUNDS = 4  # snapshots; a round takes every block it sees, later rounds only split remainders
POISON_BYTE = 0xFF


def _segments() -> list[dict]:
    """The default pool's segments (CUDA-graph private pools never serve ordinary allocations)."""
    import torch

    return [s for s in torch.cuda.memory_snapshot() if default_pool(s)]


def default_pool(segment: dict) -> bool:
    return tuple(segment.get("segment_pool_id", (0, 0))) == (0, 0)


def free_blocks(segments: list[dict] | None = None) -> list[tuple[int, int, int, bool]]:
    """(stream, address, size, small_pool) of every cached block an allocation could be handed, largest
    first."""
    blocks = []
    for seg in _segments() if segments is None else filter(default_pool, segments):
        small = seg.get("segment_type") == "small"
        for b in seg["blocks"]:
            if b["state"] != "inactive" or b["size"] < MIN_BLOCK:
                continue
            if not small and b["size"] <= SMALL_REQUEST_MAX:
                continue  # a large-pool block this small is never handed out
            blocks.append((seg.get("stream", 0), b["address"], b["size"], small))
    return sorted(blocks, key=lambda b: -b[2])


class _Spans:
    """Address ranges of the segments cached at the start."""

    def __init__(self, segments: list[dict]):
        spans = sorted((s["address"], s["address"] + s["total_size"]) for s in segments)
        self.starts = [a for a, _ in spans]
        self.ends = [b for _, b in spans]

    def __contains__(self, ptr: int) -> bool:
        i = bisect.bisect_right(self.starts, ptr) - 1
        return i >= 0 and ptr < self.ends[i]


def poison_free_cache() -> int:
    """Fill every cached-but-free block with 0xFF bytes without growing the cache; returns the bytes filled."""
    import contextlib

    import torch

    segments = _segments()
    cached = _Spans(segments)
    hold, fresh, filled, tried = [], [], 0, set()
    streams: dict[int, object] = {}
    for _ in range(ROUNDS):
        todo = [b for b in free_blocks(segments) if b[1] in cached and (b[1], b[2]) not in tried]
        if not todo:
            break
        for stream, address, size, small in todo:
            tried.add((address, size))
            request = min(size, SMALL_REQUEST_MAX) if small else size
            try:
                if stream and stream not in streams:
                    streams[stream] = torch.cuda.ExternalStream(stream)
                with torch.cuda.stream(streams[stream]) if stream else contextlib.nullcontext():
                    block = torch.empty(request, dtype=torch.uint8, device="cuda")
                    block.fill_(POISON_BYTE)
            except RuntimeError:  # a stream the candidate made and destroyed: its blocks are never handed out
                continue
            if block.data_ptr() in cached:
                hold.append(block)
                filled += request
            else:
                fresh.append(block)
            del block
        segments = _segments()
    torch.cuda.synchronize()
    if fresh:
        fresh.clear()
        torch.cuda.empty_cache()  # frees only wholly free segments: the poisoned ones are still held
    hold.clear()
    return filled


def reserve(nbytes: int) -> None:
    """Under the shared GPU lock, before work that runs outside it (a precompile's compile-only forward): make
    the caching allocator hold a free block of ``nbytes``, so that work's allocations (outputs the size of the
    inputs) come from the cache rather than from cudaMalloc while another worker may be timing. Another
    process's cudaMalloc/cudaFree slows timed memory-bound kernels (by 4-13 % on an H200:
    ``bench/interference_probe.py``). Where a free block of that size is cached already, it is
    only taken and given back; else the cache grows by ``nbytes`` (given back between jobs, `release_cache`).
    Best effort: where the device has not that much to spare, nothing is reserved and nothing fails."""
    import torch

    if nbytes <= 0 or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    try:
        block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        return
    del block


def release_cache(keep: int = KEEP_CACHED, hold=contextlib.nullcontext) -> bool:
    """Between jobs: give the caching allocator's free memory back to the device when it holds more than
    ``keep`` bytes; returns whether it did. Several workers and a trainer share one GPU, and the allocator keeps
    a process's peak: on an H200 four workers of one training run held 8-20 GB each while idle, and three runs
    ran the card out of memory. Within a job nothing changes (the poison fills whatever is cached when the
    candidate runs, after the reference has run), and a worker that evaluates small problems keeps its cache.
    ``hold()`` is entered around the release only, not around the check (a host-side count): where it is the
    GPU lock, a worker with nothing to give back does not wait out another worker's timing before reporting."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    if torch.cuda.memory_reserved() <= keep:
        return False
    with hold():
        torch.cuda.empty_cache()
    return True


class ReleaseWatch:
    """Whether the caching allocator gave memory back to the device between ``mark()`` and ``released()``: a
    cudaFree counted (``num_device_free``, where this torch keeps it) or its reserved bytes fell, with no
    out-of-memory retry between (the allocator frees cached blocks itself only to retry a failed allocation).
    During a timing nothing of kzcore's releases memory, so a release across a candidate's timed call is the
    candidate's (`kzcore.timed.TimedRounds`' ``allocator``). One statistics read each (about 0.3 ms on an H200),
    on checked pairs only."""

    def __init__(self, stats=None):
        import torch

        self.stats = stats or torch.cuda.memory_stats
        self.marked: tuple[int, int, int] | None = None

    def _read(self) -> tuple[int, int, int]:
        stats = self.stats()
        return (
            stats.get("reserved_bytes.all.current", 0),
            stats.get("num_alloc_retries", 0),
            stats.get("num_device_free", 0),
        )

    def mark(self) -> None:
        self.marked = self._read()

    def released(self) -> str:
        """What was given back since the mark, in words ("": nothing, or an out-of-memory retry explains it)."""
        if self.marked is None:
            return ""
        (before, retries_before, frees_before), (now, retries, frees) = self.marked, self._read()
        self.marked = None
        if retries != retries_before or (now >= before and frees == frees_before):
            return ""
        return f"{frees - frees_before} cudaFree call(s), reserved memory {before / 2**20:.1f} to {now / 2**20:.1f} MiB"
