"""NVRTC compile latency of the built-in cuda-dialect reference solutions. Prints JSON (and writes --out).

For each solution: every kernel string compiled from a cold cache `--repeats` times (median and min), and
one cache hit. Also the process's first compile (loading libnvrtc included) and importing kz_cuda. Runs the same on a CPU-only
machine and on a GPU machine (NVRTC needs no GPU); on a GPU it compiles for that GPU's architecture.
The cuda-inline dialect (load_inline builds) is not built yet, so it is not timed.

    python bench/cuda_compile.py --out bench/results/<date>-cpu-cuda-compile.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "kzcore" / "suites" / "builtin" / "solutions" / "cuda"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--arch", default=None, help="default: this GPU's own, else sm_90")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    t0 = time.perf_counter()
    from kz_cuda.compile import cache_stats, clear_cache, compile_cuda, nvrtc_version
    from kz_cuda.launch import arch_for_device
    from kz_cuda.runtime import kernel_strings

    import_s = time.perf_counter() - t0
    arch = args.arch or arch_for_device("cuda")
    t0 = time.perf_counter()
    first = compile_cuda('extern "C" __global__ void k(float* x) { x[threadIdx.x] = 0.0f; }', arch=arch)
    first_s = time.perf_counter() - t0
    assert first.cubin[:4] == b"\x7fELF"

    per_solution = {}
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
    medians = [v["median_s"] for v in per_solution.values()]
    report = {
        "what": "NVRTC compile latency, built-in cuda reference solutions (cold cache; median of repeats)",
        "machine": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "nvrtc": nvrtc_version(),
        "arch": arch,
        "repeats": args.repeats,
        "import_kz_cuda_s": round(import_s, 4),
        "first_compile_in_process_s": round(first_s, 4),  # loads libnvrtc
        "solutions": len(per_solution),
        "median_of_medians_s": round(statistics.median(medians), 4),
        "max_median_s": round(max(medians), 4),
        "per_solution": per_solution,
        "cuda_inline": "not built yet: not timed",
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
