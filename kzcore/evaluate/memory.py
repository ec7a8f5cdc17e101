"""Poisoning the CUDA caching allocator's free memory with NaN before a candidate runs, so an output the
candidate leaves partly unwritten (``torch.empty`` + a partial kernel) reads NaN, never stale results."""

from __future__ import annotations

SMALL_BLOCK = 512 * 1024  # requests <= 1 MiB come from the allocator's small pool (2 MiB segments)


def poison_free_cache() -> int:
    """Fill every byte the caching allocator holds but has not handed out with NaN; returns the bytes filled."""
    import torch

    stats = torch.cuda.memory_stats()
    free = stats.get("reserved_bytes.all.current", 0) - stats.get("allocated_bytes.all.current", 0)
    filled = 0
    hold = []
    # Large pool: grab the free bytes in shrinking chunks so split/fragmented blocks get reused too.
    chunk = free
    while chunk >= 2 * 1024 * 1024 and filled < free:
        try:
            t = torch.empty(chunk // 4, dtype=torch.float32, device="cuda")
        except torch.OutOfMemoryError:
            chunk //= 2
            continue
        # Only blocks reused from the cache matter; a fresh segment would be returned by empty_cache.
        t.fill_(float("nan"))
        hold.append(t)
        filled += chunk
        chunk = min(chunk, free - filled)
    # Small pool: a few segments' worth of sub-MiB blocks.
    hold += [torch.full((SMALL_BLOCK // 4,), float("nan"), device="cuda") for _ in range(16)]
    filled += 16 * SMALL_BLOCK
    del hold
    return filled
