"""Does another process's device-memory or module traffic slow the kernels this one times?

The evaluator's exclusive GPU lock keeps other workers' kernels out of a timing, but some of their work on
the device runs outside any lock: returning cached memory between jobs (``release_cache``: cudaFree), the
allocations a precompile's compile-only forward makes, loading compiled kernels into their context. The
ground truth's 4-worker pool can see runs of consecutive placements slow on both sides (on an H200,
8_MeanReduction at 4096 x 8192: candidate +9 %, reference +4 % for 4-6 of 8 placements, then back), which is
what another context's work on the GPU would do to memory-bound kernels.

This probe times a reference and candidate (do_bench, median, L2 flushed) in rounds while a helper process
does one kind of traffic in a loop, then none:

- ``idle``: the helper holds a CUDA context and does nothing;
- ``alloc``: allocates 2 GiB, frees it and empties its cache (cudaMalloc / cudaFree), again and again;
- ``alloc-touch``: the same, writing the block once before freeing it;
- ``load``: compiles a small Triton kernel for a new constant each time and loads it (no launch), as a
  precompile does.

``--timeline GIB`` asks how long one such event disturbs a timing, and whether the timer's L2 flush (a fixed
memory-bound workload) sees it: the helper allocates GIB GiB once (``alloc-once``), or holds that much written
and frees it once with ``empty_cache`` (``free-once``), while this process times the candidate sample after
sample as the evaluator's timer does (flush, then the call between events) from 0.2 s before to 1.5 s after;
each sample's time, flush time and moment go in the report. ``idle-start`` has no helper: the GPU idles for
1 s, then samples run back to back for 1.5 s, judged against the last 0.5 s (does a timing that starts on an
idle GPU, its clocks down, read slow at first? the evaluator's first placements did, with one worker too).

    python -m bench run interference_probe --problem 8_MeanReduction --set batch_size=4096,dim=8192 --out i.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, cut_short, sigterm_raises, write_json_atomic  # noqa: E402

ACTIVITIES = ("idle", "alloc", "alloc-touch", "load")
GIB = 1 << 30


def _once(activity: str, gib: float, ready, go, done) -> None:
    """The timeline's helper: one allocation of ``gib`` GiB (``alloc-once``), or one free of as much, written
    beforehand (``free-once``), when ``go`` is set."""
    import torch

    torch.ones(1, device="cuda")
    held = None
    if activity == "free-once":
        held = torch.empty(int(gib * GIB), dtype=torch.uint8, device="cuda")
        held.fill_(1)
    torch.cuda.synchronize()
    ready.set()
    go.wait(120)
    if activity == "free-once":
        del held
        torch.cuda.empty_cache()
    else:
        held = torch.empty(int(gib * GIB), dtype=torch.uint8, device="cuda")
    done.set()
    time.sleep(2.0)


def timeline(ctx, candidate, activity: str, gib: float) -> dict:
    """The candidate timed sample after sample (flush, then the call between events, as the evaluator's timer)
    from 0.2 s before the helper's one event to 1.5 s after: each sample's ms, flush us and moment (s)."""
    import torch

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    lead, flushed, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
    ready, go, done = ctx.Event(), ctx.Event(), ctx.Event()
    helper = None
    if activity == "idle-start":  # no helper: the GPU idles, then the samples start at 0.2 s
        ready.set()
        done.set()
        torch.cuda.synchronize()
        time.sleep(1.0)
    else:
        helper = ctx.Process(target=_once, args=(activity, gib, ready, go, done), daemon=True)
        helper.start()
    try:
        ready.wait(120)
        samples, t0, fired, event_s = [], time.perf_counter(), False, None
        if activity == "idle-start":
            t0 -= 0.2  # its samples start at the event
            fired = True
        while time.perf_counter() - t0 < 1.7:
            now = time.perf_counter() - t0
            if not fired and now >= 0.2:
                go.set()
                fired = True
            if fired and event_s is None and done.is_set():
                event_s = now
            lead.record()
            flush.zero_()
            flushed.record()
            start.record()
            candidate()
            end.record()
            end.synchronize()
            samples.append((round(now, 4), start.elapsed_time(end), lead.elapsed_time(flushed) * 1000))
    except BaseException:  # cut short (SIGTERM, Ctrl-C): the helper ended too
        _end(helper)
        raise
    if helper is not None:
        helper.join(10)
    calm = (lambda t: t < 0.2) if activity != "idle-start" else (lambda t: t >= 1.2)  # the reference samples
    before = [ms for t, ms, _ in samples if calm(t)]
    quiet = statistics.median(before) if before else None
    disturbed = [t for t, ms, _ in samples if t >= 0.2 and quiet and ms > quiet * 1.02]
    return {
        "activity": activity,
        "gib": gib,
        "event_done_s": event_s,
        "quiet_ms": quiet,
        "quiet_flush_us": statistics.median(f for t, _, f in samples if calm(t)) if before else None,
        "max_ms_after": max((ms for t, ms, _ in samples if t >= 0.2), default=None),
        "max_flush_us_after": max((f for t, _, f in samples if t >= 0.2), default=None),
        "disturbed_from_to_s": [disturbed[0], disturbed[-1]] if disturbed else None,
        "disturbed_samples": len(disturbed),
        "samples": samples,
    }


def _end(helper) -> None:
    """A helper process ended now (a run cut short): terminated, then killed if it has not exited in 5 s."""
    if helper is None:
        return
    helper.terminate()
    helper.join(5)
    if helper.is_alive():
        helper.kill()
        helper.join(5)


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
    ap.add_argument("--timeline", type=float, default=0.0, metavar="GIB", help="also time around one event of GIB GiB")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("interference_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    state: dict = {"rows": [], "summary": {}, "timelines": []}
    try:
        with sigterm_raises():
            probe(args, state)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("interference_probe.py", args.out, exc, lambda: interference_report(state, args, partial=True))
    if args.out:
        write_json_atomic(args.out, interference_report(state, args, partial=False))
    return 0


def probe(args, state: dict) -> None:
    """The rounds under each activity, then the timelines (``--timeline``); rows, summaries and timelines
    filled into ``state`` as they are measured, the report so far written to ``--out`` after each activity and
    each timeline (a kill that no handler sees still leaves it). Helper processes end however it ends."""
    import torch
    from triton.testing import do_bench

    from bench.placement_probe import _load

    def checkpoint() -> None:
        if args.out:
            write_json_atomic(args.out, interference_report(state, args, partial=True))

    problem, solution = _load(args.problem, args.level, args.set)
    ctx = mp.get_context("spawn")
    state["t0"] = time.perf_counter()
    rows, summary, timelines = state["rows"], state["summary"], state["timelines"]
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
            try:
                ready.wait(120)
                time.sleep(0.5)
                start_count = counter.value
                for r in range(args.rounds):
                    row = {"activity": activity, "round": r}
                    row.update(ref_ms=do_bench(ref, return_mode="median"), cand_ms=do_bench(cand, return_mode="median"))
                    rows.append(row)
                done = counter.value - start_count
            except BaseException:  # cut short (SIGTERM, Ctrl-C): the helper ended too
                stop.set()
                _end(helper)
                raise
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
            checkpoint()
        for activity in ("idle-start", "alloc-once", "free-once") if args.timeline else ():
            line = timeline(ctx, cand, activity, args.timeline)
            timelines.append(line)
            print(
                f"{activity:12s} {args.timeline:g} GiB: quiet {line['quiet_ms']:.4f} ms (flush "
                f"{line['quiet_flush_us']:.0f} us), after it up to {line['max_ms_after']:.4f} ms (flush "
                f"{line['max_flush_us_after']:.0f} us), {line['disturbed_samples']} samples > 2 % slower "
                f"in {line['disturbed_from_to_s']} s (event done at {line['event_done_s']} s)",
                flush=True,
            )
            checkpoint()


def interference_report(state: dict, args, partial: bool) -> dict:
    """The report from ``state`` (`probe`): the rows measured, the activities and timelines done (fewer in a
    run cut short)."""
    import torch

    return {
        "bench": "interference-probe",
        "partial": partial,
        "timelines": state["timelines"],
        "problem": args.problem,
        "set": args.set,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d"),
        "rows": state["rows"],
        "summary": state["summary"],
        "wall_s": round(time.perf_counter() - state["t0"], 1) if "t0" in state else None,
    }


if __name__ == "__main__":
    sys.exit(main())
