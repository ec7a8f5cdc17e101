"""NVRTC compile latency of the built-in cuda-dialect reference solutions. Prints JSON (and writes --out).

For each solution: every kernel string compiled from a cold cache `--repeats` times (median and min), and
one cache hit. Also the process's first compile (loading libnvrtc included) and importing kz_cuda. Runs the same on a CPU-only
machine and on a GPU machine (NVRTC needs no GPU); on a GPU it compiles for that GPU's architecture.

With ``--inline`` it also times the cuda-inline dialect on the same problems: each built-in cuda-inline solution
imported from a cold disk cache (a fresh temporary KZ_CACHE per repeat: torch's load_inline runs nvcc and the
host compiler), then again from the warm cache, and the prebuild of all of them in parallel CPU processes; with
the ratio of the cold build to the NVRTC median of the same problem. That needs a CUDA build of torch and nvcc;
elsewhere the report says why it was not timed.

    python -m bench run cuda_compile --out bench/results/<date>-cpu-cuda-compile.json
    python -m bench run cuda_compile --inline --out bench/results/<date>-h200-cuda-compile.json
    python -m bench run cuda_compile --inline --e2e ...   # + end-to-end evaluations of both dialects (GPU)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, scratch_dir, sigterm_raises, write_json_atomic  # noqa: E402

BUILTIN_SUITE = ROOT / "plugins" / "suites" / "kz_suites" / "builtin"  # the kz_suites plugin's data
SOLUTIONS = BUILTIN_SUITE / "solutions" / "cuda"
INLINE_SOLUTIONS = BUILTIN_SUITE / "solutions" / "cuda-inline"


def _fresh_cache() -> Path:
    path = Path(scratch_dir("kz-bench-cache-"))
    os.environ["KZ_CACHE"] = str(path)
    return path


def time_inline(per_solution: dict, repeats: int, out: dict | None = None) -> dict:
    """Cold and warm load_inline builds of the cuda-inline solutions, and their parallel prebuild, filled into
    ``out`` (returned) as they are timed: a run cut short keeps the solutions done."""
    import torch

    from kz_cuda import inline
    from kz_cuda.prebuild import build_workers, prebuild

    out = {} if out is None else out
    if not inline.can_build_cuda():
        out["not_timed"] = f"this torch ({torch.__version__}) cannot build CUDA extensions (needs CUDA torch + nvcc)"
        return out
    device = "cuda" if torch.cuda.is_available() else "cpu"
    saved = os.environ.get("KZ_CACHE")
    paths = sorted(INLINE_SOLUTIONS.glob("level*/*.py"))
    out.update({"device": device, "arch": inline.current_arch(), "toolchain": inline.toolchain(), "per_solution": {}})
    try:
        for path in paths:
            key = f"{path.parent.name}/{path.stem}"
            cold = []
            for r in range(repeats):
                cache = _fresh_cache()
                copy = cache / f"kz_bench_{path.parent.name}_{path.stem}_{r}.py"
                copy.write_text(path.read_text())
                t = time.perf_counter()
                inline.load_module(copy, device)
                cold.append(time.perf_counter() - t)
            warm_copy = copy.with_name(copy.stem + "_warm.py")
            warm_copy.write_text(path.read_text())
            inline.take_events()
            t = time.perf_counter()
            inline.load_module(warm_copy, device)
            warm = time.perf_counter() - t
            assert [e["status"] for e in inline.take_events()] == ["cached"]
            shutil.rmtree(cache, ignore_errors=True)
            entry = {"cold_median_s": round(statistics.median(cold), 3), "cold_s": [round(c, 3) for c in cold]}
            entry["warm_s"] = round(warm, 4)
            nvrtc = per_solution.get(key)
            if nvrtc:
                entry["nvrtc_median_s"] = nvrtc["median_s"]
                entry["cold_over_nvrtc"] = round(entry["cold_median_s"] / nvrtc["median_s"], 1)
            out["per_solution"][key] = entry
        cache = _fresh_cache()
        workers = build_workers(len(paths))
        t = time.perf_counter()
        outcomes = prebuild([p.read_text() for p in paths], workers)
        out["prebuild"] = {
            "solutions": len(paths),
            "workers": workers,
            "wall_s": round(time.perf_counter() - t, 3),
            "statuses": [o.status.value for o in outcomes],
            "per_process_s": [o.seconds for o in outcomes],
        }
        shutil.rmtree(cache, ignore_errors=True)
    finally:
        if saved is None:
            os.environ.pop("KZ_CACHE", None)
        else:
            os.environ["KZ_CACHE"] = saved
    colds = [v["cold_median_s"] for v in out["per_solution"].values()]
    ratios = [v["cold_over_nvrtc"] for v in out["per_solution"].values() if "cold_over_nvrtc" in v]
    out["median_cold_s"] = round(statistics.median(colds), 3)
    if ratios:
        out["median_cold_over_nvrtc"] = round(statistics.median(ratios), 1)
    return out


def time_e2e(out: dict | None = None) -> dict:
    """End-to-end evaluation latency of each dialect's built-in solutions, one at a time through a warm
    one-worker pool with cold caches (a new pool: NVRTC's in-memory cache empty; a fresh KZ_CACHE: every
    load_inline build runs, in this process's prepare step, before the worker gets the job). Filled into
    ``out`` (returned) as it goes: a dialect cut short keeps its results so far, marked ``"cut_short": true``."""
    import torch

    out = {} if out is None else out
    if not torch.cuda.is_available():
        out["not_timed"] = "needs a CUDA GPU"
        return out
    from kzcore.evaluate.runner import map_prepared
    from kzcore.executors.local import LocalPool
    from kzcore.plugins import get_plugin_manager, plugin_specs
    from kzcore.problems import load_problems, load_solutions
    from kzcore.types import EvalConfig, EvalJob

    pm = get_plugin_manager()
    problems = load_problems("builtin", pm=pm)
    by_key = {(p.level, p.name): p for p in problems}
    config = EvalConfig(device="cuda")
    saved = os.environ.get("KZ_CACHE")
    try:
        for language in ("cuda", "cuda-inline"):
            cache = _fresh_cache()
            rows = []
            out[language] = {"cut_short": True, "results": rows}  # replaced by its figures once every one ran
            pool = LocalPool(workers=1, config=config, plugins=plugin_specs(pm))
            try:
                pool.start()
                for cand in load_solutions("builtin", problems, language, pm=pm):
                    job = EvalJob(problem=by_key[(cand.level, cand.problem)], candidate=cand, config=config)
                    t = time.perf_counter()
                    (result,) = list(map_prepared(pool, [job], pm))
                    rows.append(
                        {
                            "problem": f"level{cand.level}/{cand.problem}",
                            "status": result.status.value,
                            "e2e_s": round(time.perf_counter() - t, 4),
                            "stages": result.stages,
                        }  # fmt: skip
                    )
                    print(
                        f"e2e {language} {rows[-1]['problem']}: {result.status.value} {rows[-1]['e2e_s']} s",
                        file=sys.stderr,
                    )
            finally:
                pool.close()
                shutil.rmtree(cache, ignore_errors=True)
            level1 = [r["e2e_s"] for r in rows if r["problem"].startswith("level1/")]
            out[language] = {
                "candidates": len(rows),
                "correct": sum(r["status"] == "correct" for r in rows),
                "e2e_median_s": round(statistics.median(r["e2e_s"] for r in rows), 4) if rows else None,
                "level1_e2e_median_s": round(statistics.median(level1), 4) if level1 else None,
                "results": rows,
            }
    finally:
        if saved is None:
            os.environ.pop("KZ_CACHE", None)
        else:
            os.environ["KZ_CACHE"] = saved
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--arch", default=None, help="default: this GPU's own, else sm_90")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--inline", action="store_true", help="also time cuda-inline (load_inline) builds")
    parser.add_argument("--inline-repeats", type=int, default=1, help="cold builds per cuda-inline solution")
    parser.add_argument("--e2e", action="store_true", help="also time end-to-end evaluations of both dialects (GPU)")
    args = parser.parse_args(argv)

    state: dict = {"per_solution": {}}
    try:
        with sigterm_raises():
            measure(args, state)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("cuda_compile.py", args.out, exc, lambda: cuda_compile_report(state, args, partial=True))
    return complete(cuda_compile_report(state, args, partial=False), args.out)


def measure(args, state: dict) -> None:
    """Import, first compile, every solution's NVRTC compiles, then (when asked for) cuda-inline and the
    end-to-end evaluations; each section filled into ``state`` as it is timed, the report so far written to
    ``--out`` after each (a kill that no handler sees still leaves it)."""

    def checkpoint() -> None:
        if args.out:
            write_json_atomic(args.out, cuda_compile_report(state, args, partial=True))

    t0 = time.perf_counter()
    from kz_cuda.compile import cache_stats, clear_cache, compile_cuda
    from kz_cuda.launch import arch_for_device
    from kz_cuda.runtime import kernel_strings

    state["import_s"] = time.perf_counter() - t0
    arch = state["arch"] = args.arch or arch_for_device("cuda")
    t0 = time.perf_counter()
    first = compile_cuda('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 0.0f; }', arch=arch)
    state["first_s"] = time.perf_counter() - t0
    assert first.cubin[:4] == b"\x7fELF"

    per_solution = state["per_solution"]
    for path in sorted(SOLUTIONS.glob("level*/*.py")):
        strings = kernel_strings(path.read_text())
        cold = []
        for _ in range(args.repeats):
            clear_cache()
            t = time.perf_counter()
            for ks in strings:
                compile_cuda(ks.text, arch=arch, label=ks.label, first_line=ks.first_line)
            cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        for ks in strings:
            compile_cuda(ks.text, arch=arch)
        hit = time.perf_counter() - t
        assert cache_stats()["hits"] == len(strings)
        per_solution[f"{path.parent.name}/{path.stem}"] = {
            "median_s": round(statistics.median(cold), 4),
            "min_s": round(min(cold), 4),
            "cache_hit_s": round(hit, 6),
            "source_lines": sum(ks.text.count("\n") for ks in strings),
        }
    if args.inline:
        checkpoint()
        time_inline(per_solution, args.inline_repeats, state.setdefault("cuda_inline", {}))
    if args.e2e:
        checkpoint()
        time_e2e(state.setdefault("e2e", {}))


def cuda_compile_report(state: dict, args, partial: bool) -> dict:
    """The report from ``state`` (`measure`): complete, or what a run cut short had (fewer solutions; a section
    not reached None, one cut short with what it timed)."""
    per_solution = state["per_solution"]
    medians = [v["median_s"] for v in per_solution.values()]
    nvrtc = None
    if "import_s" in state:  # kz_cuda imported (asked only now: asking loads libnvrtc, the first compile's cost)
        from kz_cuda.compile import nvrtc_version

        nvrtc = nvrtc_version()
    seconds = {k: round(state[k], 4) if k in state else None for k in ("import_s", "first_s")}
    return {
        "what": "NVRTC compile latency, built-in cuda reference solutions (cold cache; median of repeats)",
        "partial": partial,
        "machine": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "nvrtc": nvrtc,
        "arch": state.get("arch"),
        "repeats": args.repeats,
        "import_kz_cuda_s": seconds["import_s"],
        "first_compile_in_process_s": seconds["first_s"],  # loads libnvrtc
        "solutions": len(per_solution),
        "median_of_medians_s": round(statistics.median(medians), 4) if medians else None,
        "max_median_s": round(max(medians), 4) if medians else None,
        "per_solution": per_solution,
        "cuda_inline": state.get("cuda_inline") if args.inline else "not asked for (--inline)",
        "e2e": state.get("e2e") if args.e2e else "not asked for (--e2e)",
    }


if __name__ == "__main__":
    sys.exit(main())
