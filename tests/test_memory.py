"""Which cached blocks the NaN poisoning asks the CUDA allocator for (kzcore.evaluate.memory), from a
memory snapshot: the rules run on a CPU; the poisoning itself is tested on the GPU (tests/test_gpu.py)."""

from __future__ import annotations

from kzcore.evaluate.memory import MIN_BLOCK, SMALL_REQUEST_MAX, _Spans, free_blocks

MIB = 1 << 20


def segment(address, blocks, kind="large", stream=0, pool=(0, 0)):
    total = sum(size for size, _ in blocks)
    return {
        "address": address, "total_size": total, "stream": stream, "segment_type": kind, "segment_pool_id": pool,
        "blocks": [{"size": size, "state": state, "address": address} for size, state in blocks],
    }  # fmt: skip


def test_free_blocks_follow_the_allocators_pools():
    snapshot = [
        segment(0x1000_0000, [(20 * MIB, "inactive")]),
        segment(0x2000_0000, [(19 * MIB, "active_allocated"), (MIB, "inactive")]),  # never handed out
        segment(0x3000_0000, [(2 * MIB, "inactive")], kind="small"),  # whole free small segment
        segment(0x4000_0000, [(4096, "inactive"), (2 * MIB - 4096, "active_allocated")], kind="small", stream=7),
        segment(0x5000_0000, [(256, "inactive")], kind="small"),  # below the allocator's rounding unit
        segment(0x6000_0000, [(8 * MIB, "inactive")], pool=(1, 2)),  # a CUDA graph's private pool
    ]
    blocks = free_blocks(snapshot)
    assert [(stream, size, small) for stream, _, size, small in blocks] == [
        (0, 20 * MIB, False),
        (0, 2 * MIB, True),  # over SMALL_REQUEST_MAX: the poisoning takes it in 1 MiB pieces
        (7, 4096, True),
    ]
    assert SMALL_REQUEST_MAX == MIB and MIN_BLOCK == 512


def test_spans_tell_cached_memory_from_new_segments():
    spans = _Spans([segment(0x1000, [(0x100, "inactive")]), segment(0x5000, [(0x200, "inactive")])])
    assert 0x1000 in spans and 0x10FF in spans and 0x5100 in spans
    assert 0x1100 not in spans and 0x0FFF not in spans and 0x5200 not in spans and 0x9000 not in spans
