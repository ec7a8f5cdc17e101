"""Does another process's device-memory or module traffic slow the kernels this one times? (issue 17)

The evaluator's exclusive GPU lock keeps other workers' kernels out of a timing, but some of their work on
the device runs outside any lock: returning cached memory between jobs (``release_cache``: cudaFree), the
allocations a precompile's compile-only forward makes, loading compiled kernels into their context. On an
H200 (2026-12-03) the ground truth's 4-worker pool saw runs of consecutive placements slow on both sides
(8_MeanReduction at 4096 x 8192: candidate +9 %, reference +4 % for 4-6 of 8 placements, then back), which
is what another context's work on the GPU would do to memory-bound kernels.

This probe times a reference and candidate (do_bench, median, L2 flushed) in rounds while a helper process
does one kind of traffic in a loop, then none:

- ``idle``: the helper holds a CUDA context and does nothing;
- ``alloc``: allocates 2 GiB, frees it and empties its cache (cudaMalloc / cudaFree), again and again;
- ``alloc-touch``: the same, writing the block once before freeing it;
- ``load``: compiles a small Triton kernel for a new constant each time and loads it (no launch), as a
  precompile does.

    python bench/interference_probe.py --problem 8_MeanReduction --set batch_size=4096,dim=8192 --out i.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ACTIVITIES = ("idle", "alloc", "alloc-touch", "load")
GIB = 1 << 30


def _helper(activity: str, ready, stop, counter) -> None:
    import torch

    torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    kernel = None
    if activity == "load":
        import triton
        import triton.language as tl

        @triton.jit
        def add_const(x_ptr, n, C: tl.constexpr, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + C, mask=offs < n)

        kernel = add_const
        x = torch.ones(1024, device="cuda")
    ready.set()
    i = 0
    while not stop.is_set():
        if activity in ("alloc", "alloc-touch"):
            block = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
            if activity == "alloc-touch":
                block.fill_(1)
                torch.cuda.synchronize()
            del block
            torch.cuda.empty_cache()
        elif activity == "load":
            compiled = kernel.warmup(x, x.numel(), C=i + 1, BLOCK=1024, grid=(1,))
            init = getattr(compiled, "_init_handles", None)
            if callable(init):
                init()
        else:
            time.sleep(0.01)
        i += 1
        counter.value = i


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", default="8_MeanReduction")
    ap.add_argument("--level", default="level1")
    ap.add_argument("--set", default="", help="module constants for get_inputs, e.g. batch_size=4096,dim=8192")
    ap.add_argument("--rounds", type=int, default=6, help="do_bench rounds per activity")
    ap.add_argument("--activities", default=",".join(ACTIVITIES))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("interference_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    from placement_probe import _load
    from triton.testing import do_bench

    problem, solution = _load(args.problem, args.level)
    for item in filter(None, args.set.split(",")):
        name, _, value = item.partition("=")
        setattr(problem, name.strip(), int(value))
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    rows, summary = [], {}
    with torch.device("cuda"), torch.no_grad():
        torch.manual_seed(0)
        reference, candidate = problem.Model(*problem.get_init_inputs()), solution.ModelNew(*problem.get_init_inputs())
        inputs = list(problem.get_inputs())
        ref, cand = (lambda: reference(*inputs)), (lambda: candidate(*inputs))
        ref(), cand()
        torch.cuda.synchronize()
        for activity in args.activities.split(","):
            ready, stop, counter = ctx.Event(), ctx.Event(), ctx.Value("i", 0)
            helper = ctx.Process(target=_helper, args=(activity, ready, stop, counter), daemon=True)
            helper.start()
            ready.wait(120)
            time.sleep(0.5)
            start_count = counter.value
            for r in range(args.rounds):
                row = {"activity": activity, "round": r}
                row.update(ref_ms=do_bench(ref, return_mode="median"), cand_ms=do_bench(cand, return_mode="median"))
                rows.append(row)
            done = counter.value - start_count
            stop.set()
            helper.join(60)
            mine = [x for x in rows if x["activity"] == activity]
            summary[activity] = {
                "ref_ms": statistics.mean(x["ref_ms"] for x in mine),
                "cand_ms": statistics.mean(x["cand_ms"] for x in mine),
                "ref_max": max(x["ref_ms"] for x in mine),
                "cand_max": max(x["cand_ms"] for x in mine),
                "helper_iterations": done,
            }
            s = summary[activity]
            print(
                f"{activity:12s} ref {s['ref_ms']:.4f} (max {s['ref_max']:.4f})  cand {s['cand_ms']:.4f} "
                f"(max {s['cand_max']:.4f})  helper did {done} in the meantime",
                flush=True,
            )
    report = {
        "bench": "interference-probe",
        "problem": args.problem,
        "set": args.set,
        "gpu": torch.cuda.get_device_name(0),
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "summary": summary,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
