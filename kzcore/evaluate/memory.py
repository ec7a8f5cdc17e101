"""Poisoning the CUDA caching allocator's free memory with NaN before a candidate runs, so an output the
candidate leaves partly unwritten (``torch.empty`` + a partial kernel) reads NaN, never stale results."""

from __future__ import annotations


def free_block_sizes() -> list[int]:
    """Sizes of the blocks the caching allocator holds but has not handed out, largest first."""
    import torch

    return sorted(
        (b["size"] for seg in torch.cuda.memory_snapshot() for b in seg["blocks"] if b["state"] == "inactive"),
        reverse=True,
    )


def poison_free_cache() -> int:
    """Fill every cached-but-free block with NaN without growing the cache; returns the bytes filled.

    Asking the allocator for exactly a free block's size hands back that block (best fit). When no cached
    block fits (a small request cannot take a large-pool block), the allocator makes a new segment; it is
    filled too, and every segment left wholly free at the end is released, so the cache never grows."""
    import torch

    reserved = torch.cuda.memory_reserved()
    hold, filled = [], 0
    for size in free_block_sizes():
        if size < 4:
            continue
        t = torch.empty(size // 4, dtype=torch.float32, device="cuda")
        t.fill_(float("nan"))
        hold.append(t)
        filled += size
    del hold
    if torch.cuda.memory_reserved() > reserved:
        torch.cuda.empty_cache()
    return filled
