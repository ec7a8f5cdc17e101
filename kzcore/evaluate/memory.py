"""Poisoning the CUDA caching allocator's free memory with NaN before a candidate runs, so an output the
candidate leaves partly unwritten (``torch.empty`` + a partial kernel) reads NaN, never stale results."""

from __future__ import annotations


def free_blocks() -> list[tuple[int, int]]:
    """(stream, size) of the blocks the caching allocator holds but has not handed out, largest first.

    A cached block is only handed out again for a request on the stream it was allocated on."""
    import torch

    return sorted(
        (
            (seg.get("stream", 0), b["size"])
            for seg in torch.cuda.memory_snapshot()
            for b in seg["blocks"]
            if b["state"] == "inactive"
        ),
        key=lambda sb: -sb[1],
    )


def poison_free_cache() -> int:
    """Fill every cached-but-free block with NaN without growing the cache; returns the bytes filled.

    Asking the allocator, on the block's own stream, for exactly a free block's size hands back that block
    (best fit). When no cached block fits (a small request cannot take a large-pool block), the allocator
    makes a new segment: that allocation is dropped first and the cache emptied while the poisoned blocks are
    still held, so only the new segments go back and the cache never grows."""
    import contextlib

    import torch

    reserved = torch.cuda.memory_reserved()
    hold, fresh, filled = [], [], 0
    for stream, size in free_blocks():
        if size < 4:
            continue
        ctx = torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream else contextlib.nullcontext()
        before = torch.cuda.memory_reserved()
        try:
            with ctx:
                t = torch.empty(size // 4, dtype=torch.float32, device="cuda")
                t.fill_(float("nan"))
        except RuntimeError:  # a stream the candidate made and destroyed: its blocks cannot be handed out
            continue
        if torch.cuda.memory_reserved() > before:
            fresh.append(t)
        else:
            hold.append(t)
            filled += size
    torch.cuda.synchronize()
    del fresh
    if torch.cuda.memory_reserved() > reserved:
        torch.cuda.empty_cache()  # frees only wholly free segments: the poisoned ones are still held
    del hold
    return filled
