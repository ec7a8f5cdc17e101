"""Which cached blocks the NaN poisoning asks the CUDA allocator for (kzcore.evaluate.memory), from a
memory snapshot: the rules run on a CPU; the poisoning itself is tested on the GPU (tests/test_gpu.py)."""

from __future__ import annotations

import contextlib

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


def test_a_worker_gives_back_cached_memory_over_its_keep_between_jobs(monkeypatch):
    import pytest

    torch = pytest.importorskip("torch")
    from kzcore.evaluate import memory

    released, held = [], []
    reserved = {"bytes": 0}

    @contextlib.contextmanager
    def hold():  # the GPU lock in a worker: entered only to release
        held.append(reserved["bytes"])
        yield

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved["bytes"])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: released.append(reserved["bytes"]))
    reserved["bytes"] = memory.KEEP_CACHED  # small problems: the cache stays warm, the lock is not waited for
    assert memory.release_cache(hold=hold) is False and released == [] and held == []
    reserved["bytes"] = 20 << 30  # what idle workers held on the H200 after full-size problems
    assert memory.release_cache(hold=hold) is True and released == [20 << 30] and held == [20 << 30]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # a worker that never touched the GPU
    assert memory.release_cache() is False and released == [20 << 30]


def test_the_worker_releases_the_cache_after_each_gpu_job_only():
    # which jobs give memory back (GPU, context not poisoned) is worker.after_job's, tested by its behaviour in
    # tests/test_executor_protocol.py; here: the job loop calls it once per job, before the result is sent
    import ast
    from pathlib import Path

    from kzcore.executors import worker

    tree = ast.parse(Path(worker.__file__).read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "worker_main")
    loop = next(n for n in ast.walk(main) if isinstance(n, ast.While))
    calls = [n for n in ast.walk(loop) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "after_job"]
    assert len(calls) == 1  # inside the job loop
    assert [ast.unparse(a) for a in calls[0].args[1:3]] == ["poisoned", "device"]
    # before the result is sent: when the pool has a result, the worker's memory is back (released after it,
    # an H200 worker still held 19.3 GB right after the result)
    sends = [n for n in ast.walk(loop) if isinstance(n, ast.Call) and ast.unparse(n).startswith("conn.send(('result'")]
    assert len(sends) == 1 and calls[0].lineno < sends[0].lineno
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "after_job")
    releases = [n for n in ast.walk(body) if isinstance(n, ast.Call) and ast.unparse(n.func) == "release"]
    guard = next(n for n in ast.walk(body) if isinstance(n, ast.If) and releases[0] in list(ast.walk(n)))
    assert ast.unparse(guard.test) == "device == 'cuda' and (not poisoned)"  # a poisoned context is not reused


def test_cyclic_garbage_is_collected_at_a_jobs_end_never_inside_it():
    """No collector pause can land inside a trial or a timing (it would raise the timer's launch cover), and
    trials and timing see the same collector state."""
    import gc
    import weakref

    from kzcore.executors.worker import collected_after

    class Node:
        pass

    assert gc.isenabled()
    with collected_after():
        assert not gc.isenabled()
        node = Node()
        node.me = node  # a cycle: only the collector frees it
        alive = weakref.ref(node)
        del node
        for _ in range(100_000):  # enough allocations to trigger automatic collections, were they on
            junk = [[]]  # noqa: F841
        assert alive() is not None
    assert alive() is None and gc.isenabled()


def test_the_worker_runs_each_job_inside_collected_after_with_start_up_frozen():
    import ast
    from pathlib import Path

    from kzcore.executors import worker

    tree = ast.parse(Path(worker.__file__).read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "worker_main")
    loop = next(n for n in ast.walk(main) if isinstance(n, ast.While))
    withs = [n for n in ast.walk(loop) if isinstance(n, ast.With)]
    job = next(w for w in withs if any("run_job" in ast.unparse(s) for s in w.body))
    assert "collected_after()" in [ast.unparse(item.context_expr) for item in job.items]
    source = ast.unparse(main)
    assert source.index("slate.snapshot()") < source.index("gc.freeze()") < source.index("while True")


def test_the_time_a_worker_spent_giving_memory_back_is_filed_only_when_it_gave_some(monkeypatch):
    """What the between-jobs release took, the GPU lock's wait included, goes into the result's stages
    (``release_cache``), where the throughput bench's sums find it; nothing when there was nothing to give."""
    from kzcore.evaluate import memory
    from kzcore.executors import worker

    holds = []

    def release(hold):
        with hold():
            holds.append(1)
        return True

    monkeypatch.setattr(memory, "release_cache", release)
    spent = worker._release_cache()
    assert holds == [1] and spent is not None and spent >= 0
    monkeypatch.setattr(memory, "release_cache", lambda hold: False)
    assert worker._release_cache() is None
