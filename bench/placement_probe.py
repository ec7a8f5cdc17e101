"""Does a kernel's speed depend on where its inputs lie, and which placements does it see?

For one built-in problem and its Triton solution, do_bench (median, L2 flushed) of reference and candidate on
the first input placed three ways in one process:

- ``kept``: separate allocations, every earlier one kept alive (each a new piece of device memory);
- ``offsets``: views into one larger buffer at growing byte offsets (the same allocation, shifted);
- ``recycled``: allocate, time, free and give the cache back to the driver (``empty_cache``), again.
- ``scrambled`` (``--scrambled``): a copy whose pages (the driver's allocation granularity, 2 MiB) are drawn at
  random from ``--page-pool`` times as many as it needs, mapped into one virtual range with CUDA's virtual
  memory API (the pages not drawn are given back at once): does a placement built from pages spread over a
  wider physical range read the mean speed, every time (22_MatVec's allocator copies in one job were all
  slow, or mostly fast: not independent draws)? ``--page-pool 1,2,4`` tries each pool in turn (rows
  ``scrambled-p1``, ``scrambled-p2``, ``scrambled`` for 4); pool 1 only shuffles the order of the pages.
  On an H200 no: the pool, not the order, set 22_MatVec's speed (docs/journal.md), so the evaluator's timer
  does not use such copies.
- ``phases`` (``--phases N --phase-buffers M``): M separate buffers, each read as N views of the input at
  offsets spread evenly over its length: is a buffer's mean over those offsets the same wherever it lands?
- ``outputs``: the first placement's inputs, but each measurement's outputs on new memory (one output of
  each side from every earlier measurement kept alive, so the allocator hands the next ones another block).
- ``heat`` (``--heat-rounds``): the first placement again after ``--heat-s`` seconds of copying a 4 GiB buffer
  into another (the GPU as busy as four evaluator workers keep it), then after as long idle, each with the GPU's
  temperatures, clocks and power from nvidia-smi: does the kernel slow down as the GPU (its memory) warms?

On an H200 22_MatVec's candidate reads either ~0.490 or ~0.554 ms from one allocation to the next, in fresh
processes and within one, while its cuBLAS reference stays within 0.1 %. This probe tells the evaluator's
timer which placements are cheap to sample (views into one buffer cost no second copy).

    python -m bench run placement_probe --problem 22_MatVec --out probe.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, cut_short, sigterm_raises, write_json_atomic  # noqa: E402

BUILTIN = ROOT / "plugins/suites/kz_suites/builtin"
MIB = 1 << 20
OFFSETS_MIB = (0, 0.0625, 1, 2, 4, 6, 8, 16, 32, 64, 128, 256)


def _load(problem: str, level: str, sets: str = ""):
    """The built-in problem's module, its module constants set from ``sets`` (``batch_size=4096,dim=4096``,
    read by its get_inputs), and its Triton solution's module."""
    from kzcore.problems import import_module_from_file

    problem_mod = import_module_from_file(BUILTIN / level / f"{problem}.py", f"probe_problem_{problem}")
    for item in filter(None, sets.split(",")):
        name, _, value = item.partition("=")
        setattr(problem_mod, name.strip(), int(value))
    solution = import_module_from_file(
        BUILTIN / "solutions/triton" / level / f"{problem}.py", f"probe_solution_{problem}"
    )
    return problem_mod, solution


def _check(result):
    """The values of a cuda.bindings driver call, after its status (raised when it is not CUDA_SUCCESS)."""
    from cuda.bindings import driver as cu

    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call failed: {err}")
    return values[0] if len(values) == 1 else values


class ScrambledCopy:
    """A copy of tensor ``x`` on pages drawn at random from ``pool`` times as many physical pages as it needs
    (cuMemCreate one page each; cuMemAddressReserve + cuMemMap the drawn ones in order; the rest released at
    once). ``tensor`` is the copy (a zero-copy view through ``__cuda_array_interface__``); `free` unmaps it."""

    def __init__(self, x, pool: int, seed: int):
        import random

        import torch
        from cuda.bindings import driver as cu

        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = torch.cuda.current_device()
        granularity = cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        page = int(_check(cu.cuMemGetAllocationGranularity(prop, granularity)))
        nbytes = x.numel() * x.element_size()
        pages = -(-nbytes // page)
        handles = [_check(cu.cuMemCreate(page, prop, 0)) for _ in range(pages * max(1, pool))]
        drawn = random.Random(seed).sample(range(len(handles)), pages)
        self.size = pages * page
        self.va = _check(cu.cuMemAddressReserve(self.size, 0, 0, 0))
        base = int(self.va)
        for i, h in enumerate(drawn):
            _check(cu.cuMemMap(base + i * page, page, 0, handles[h], 0))
        access = cu.CUmemAccessDesc()
        access.location = prop.location
        access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _check(cu.cuMemSetAccess(self.va, self.size, [access], 1))
        for h in handles:  # a mapped page lives on until unmapped; the others go back now
            _check(cu.cuMemRelease(h))

        class _Interface:
            __cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (base, False), "version": 3}

        self.tensor = torch.as_tensor(_Interface(), device="cuda").view(x.dtype).view(x.shape)
        self.tensor.copy_(x)
        self.address = hex(base)

    def free(self) -> None:
        import torch
        from cuda.bindings import driver as cu

        self.tensor = None
        torch.cuda.synchronize()
        _check(cu.cuMemUnmap(self.va, self.size))
        _check(cu.cuMemAddressFree(self.va, self.size))


def phases(first, measure, views: int, buffers: int, rows: list | None = None) -> list[dict]:
    """The ``phases`` mode: ``buffers`` separate buffers of twice the input (each kept, so the next is other
    memory), and in each ``views`` views of the input at offsets k / ``views`` of its length (2 MiB-aligned).
    22_MatVec's candidate read ~0.489 or ~0.553 ms by allocation, and 0.516 ms at a 256 MiB offset into a fast
    one: if a buffer's mean over evenly spread offsets is the same wherever the buffer lands, views so spread
    would sample the speed the evaluator's separate copies only sometimes do, with under a quarter of their memory.
    The rows are appended to ``rows`` (returned) as they are measured: a run cut short keeps them."""
    import torch

    nbytes = first.numel() * first.element_size()
    step = max(2 * MIB, (nbytes // views) // (2 * MIB) * (2 * MIB))
    held, rows = [], [] if rows is None else rows
    for b in range(buffers):
        buf = torch.empty(nbytes + step * (views - 1), dtype=torch.uint8)
        held.append(buf)
        for k in range(views):
            view = buf[k * step : k * step + nbytes].view(first.dtype).view(first.shape)
            view.copy_(first)
            rows.append(measure(view, "phases", f"b{b}+{k * step // MIB}MiB"))
    return rows


GPU_FIELDS = "temperature.gpu,temperature.memory,clocks.sm,clocks.mem,power.draw,clocks_throttle_reasons.active"


def gpu_state() -> dict:
    """The GPU's temperatures, clocks, power and throttle reasons now (nvidia-smi; {} where it cannot say)."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "-i", "0", f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    values = [v.strip() for v in out.stdout.strip().split(",")]
    return dict(zip(GPU_FIELDS.split(","), values)) if out.returncode == 0 and len(values) == 6 else {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", default="22_MatVec")
    ap.add_argument("--level", default="level1")
    ap.add_argument("--kept", type=int, default=8, help="separate allocations kept alive")
    ap.add_argument("--recycled", type=int, default=6, help="allocate / time / free + empty_cache cycles")
    ap.add_argument("--outputs", type=int, default=6, help="measurements with the outputs on new memory")
    ap.add_argument("--scrambled", type=int, default=0, help="copies on pages drawn from a wider pool")
    ap.add_argument(
        "--page-pool", default="4", help="scrambled: physical pages made per page used (a list: each in turn)"
    )
    ap.add_argument("--phases", type=int, default=0, help="views per phase buffer, spread over one input's length")
    ap.add_argument("--phase-buffers", type=int, default=4, help="phases: separate buffers of twice the input")
    ap.add_argument("--heat-rounds", type=int, default=0, help="busy / idle rounds of the heat mode")
    ap.add_argument("--heat-s", type=float, default=8.0, help="seconds of each busy and each idle phase")
    ap.add_argument("--set", default="", help="module constants for get_inputs, e.g. batch_size=4096,dim=4096")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("placement_probe: needs a CUDA GPU (do_bench of device placements)", file=sys.stderr)
        return 2
    state: dict = {"rows": []}
    try:
        with sigterm_raises():
            probe(args, state)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("placement_probe.py", args.out, exc, lambda: placement_report(state, args, partial=True))
    report = placement_report(state, args, partial=False)
    summary = report["summary"]
    if "phase_buffers" in summary:
        means = summary["phase_buffers"]["cand_means"]
        print(
            f"phase buffers: cand means {[round(m, 4) for m in means]} (cv {summary['phase_buffers']['cand_cv']:.2%})"
        )
    for how, s in summary.items():
        if "cand_min" in s:  # a placement's figures (phase_buffers has its own line above)
            print(
                f"{how}: cand {s['cand_min']:.4f}-{s['cand_max']:.4f} ms (cv {s['cand_cv']:.2%}), ref cv {s['ref_cv']:.2%}"
            )
    for phase, means in summary.get("heat", {}).items():
        if phase in ("busy", "idle"):
            print(f"heat {phase}: ref {means['ref']:.4f} cand {means['cand']:.4f} ms (mean)")
    if args.out:
        write_json_atomic(args.out, report)
    return 0


def probe(args, progress: dict) -> None:
    """Every placement mode asked for, one row per measurement appended to ``progress["rows"]`` as it is taken
    (``progress["t0"]``: when the measurements began)."""
    import torch
    from triton.testing import do_bench

    torch.backends.cuda.matmul.allow_tf32 = False
    problem, solution = _load(args.problem, args.level, args.set)
    progress["t0"] = time.perf_counter()
    rows = progress["rows"]
    with torch.device("cuda"), torch.no_grad():
        torch.manual_seed(0)
        reference, candidate = problem.Model(*problem.get_init_inputs()), solution.ModelNew(*problem.get_init_inputs())
        torch.manual_seed(1)
        base = list(problem.get_inputs())
        first, rest = base[0], base[1:]

        def measure(x, how: str, where, state: bool = False) -> dict:
            ref, cand = (lambda: reference(x, *rest)), (lambda: candidate(x, *rest))
            ref(), cand()
            torch.cuda.synchronize()
            row = {"how": how, "where": where, "address": hex(x.data_ptr())}
            if state:
                row["gpu"] = gpu_state()
            row.update(ref_ms=do_bench(ref, return_mode="median"), cand_ms=do_bench(cand, return_mode="median"))
            extra = f"  {row['gpu']}" if state else ""
            print(
                f"{how:9s} {str(where):>10s} {row['address']}  ref {row['ref_ms']:.4f}  cand {row['cand_ms']:.4f}{extra}"
            )
            return row

        rows.append(measure(first, "base", 0))
        pinned = []
        for i in range(args.outputs):
            pinned += [reference(first, *rest), candidate(first, *rest)]  # the blocks the last one used: kept
            rows.append(measure(first, "outputs", i))
        del pinned
        torch.cuda.empty_cache()
        if args.heat_rounds:
            src = torch.empty(1 << 30, dtype=torch.float32)  # 4 GiB each way
            dst = torch.empty_like(src)
            for r in range(args.heat_rounds):
                for phase in ("busy", "idle"):
                    end = time.perf_counter() + args.heat_s
                    while time.perf_counter() < end:
                        if phase == "busy":
                            for _ in range(20):
                                dst.copy_(src)
                            torch.cuda.synchronize()
                        else:
                            time.sleep(0.05)
                    rows.append(measure(first, "heat", f"{phase}{r}", state=True))
            del src, dst
            torch.cuda.empty_cache()
        for pool in [int(p) for p in str(args.page_pool).split(",")]:
            how = "scrambled" if pool == 4 else f"scrambled-p{pool}"  # pool 4: the first probe's, its name kept
            for i in range(args.scrambled):
                copy = ScrambledCopy(first, pool, seed=i)
                rows.append(measure(copy.tensor, how, i))
                copy.free()
        if args.phases:
            phases(first, measure, args.phases, args.phase_buffers, rows)
            torch.cuda.empty_cache()
        held = []
        for i in range(args.kept):
            x = first.clone()
            held.append(x)
            rows.append(measure(x, "kept", i))
        del held
        torch.cuda.empty_cache()
        nbytes = first.numel() * first.element_size()
        buf = torch.empty(nbytes + int(max(OFFSETS_MIB) * MIB), dtype=torch.uint8)
        for off in OFFSETS_MIB:
            start = int(off * MIB)
            view = buf[start : start + nbytes].view(first.dtype).view(first.shape)
            view.copy_(first)
            rows.append(measure(view, "offsets", off))
        del buf, view
        torch.cuda.empty_cache()
        for i in range(args.recycled):
            x = first.clone()
            rows.append(measure(x, "recycled", i))
            del x
            torch.cuda.empty_cache()


def placement_summary(rows: list[dict]) -> dict:
    """Each placement's spread (of those with two rows or more), the phase buffers' means and the heat mode's
    busy and idle means, from the rows there are (all, or those of a run cut short)."""
    summary = {}
    for how in dict.fromkeys(r["how"] for r in rows):
        cand = [r["cand_ms"] for r in rows if r["how"] == how]
        ref = [r["ref_ms"] for r in rows if r["how"] == how]
        if len(cand) > 1:
            summary[how] = {
                "cand_min": min(cand),
                "cand_max": max(cand),
                "cand_cv": statistics.pstdev(cand) / statistics.mean(cand),
                "ref_cv": statistics.pstdev(ref) / statistics.mean(ref),
            }
    buffers = {}  # the phases mode: each buffer's mean over its views, and how far those means spread
    for r in rows:
        if r["how"] == "phases":
            buffers.setdefault(r["where"].split("+")[0], []).append(r["cand_ms"])
    if buffers:
        means = [statistics.mean(v) for v in buffers.values()]
        summary["phase_buffers"] = {"cand_means": means, "cand_cv": statistics.pstdev(means) / statistics.mean(means)}
    for phase in ("busy", "idle"):  # the heat mode: each phase's mean, both sides
        heat = [r for r in rows if r["how"] == "heat" and str(r["where"]).startswith(phase)]
        if heat:
            summary.setdefault("heat", {})[phase] = {
                side: statistics.mean(r[f"{side}_ms"] for r in heat) for side in ("ref", "cand")
            }
    return summary


def placement_report(state: dict, args, partial: bool) -> dict:
    """The report from ``state`` (`probe`): its rows (fewer in a run cut short) and their summary."""
    import torch

    rows = state["rows"]
    return {
        "bench": "placement-probe",
        "partial": partial,
        "problem": args.problem,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
        "summary": placement_summary(rows),
        "wall_s": round(time.perf_counter() - state["t0"], 1) if "t0" in state else None,
    }


if __name__ == "__main__":
    sys.exit(main())
