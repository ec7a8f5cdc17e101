"""Triton compile time of one kernel for a chosen GPU architecture, on any machine (no GPU needed: Triton's
LLVM passes and the bundled ptxas run on the CPU, so the figure is the compile cost a GPU worker pays).

Arguments are typed by name: ``*_ptr`` are fp32 pointers, the names given with ``--const NAME=VALUE`` are
constexprs, every other argument an i32 (or fp32 with ``--float NAME``). Each file is compiled in a fresh
process-local cache, ``--repeats`` times.

    python -m bench run triton_compile FILE.py KERNEL --const KS=3 --const BLOCK_P=32 [FILE.py KERNEL ...]
    python -m bench run triton_compile --conv-solutions --out bench/results/<date>-cpu-triton-compile.json
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import Terminated, complete, cut_short, scratch_dir, sigterm_raises  # noqa: E402

CONV = ROOT / "plugins" / "suites" / "kz_suites" / "builtin" / "solutions" / "triton" / "level2"
# the built-in level-2 convolution solutions and the constexprs their forward passes at full size
CONV_SOLUTIONS = [
    ("8_Conv2d_ReLU_BiasAdd.py", "conv_relu_bias_kernel"),
    ("9_Conv2d_Tanh_Scale.py", "conv_tanh_scale_kernel"),
    ("10_Conv2d_Mish.py", "conv_mish_kernel"),
    ("11_Conv2d_HardSwish_Add.py", "conv_hardswish_add_kernel"),
    ("12_Conv2d_ChannelMin_Tanh.py", "conv_chmin_tanh_kernel"),
    ("13_Conv2d_MaxPool_Sigmoid.py", "conv_maxpool_sigmoid_kernel"),
]
CONV_CONSTS = {"KS": 3, "POOL": 2, "BLOCK_P": 32, "BLOCK_CO": 64, "BLOCK_CI": 16}
CONV_FLOATS = {"scale"}


def compile_once(path: Path, kernel: str, consts: dict, floats: set, capability: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location(f"kz_compile_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, kernel)
    names = fn.arg_names
    signature = {
        n: "constexpr" if n in consts else "*fp32" if n.endswith("_ptr") else "fp32" if n in floats else "i32"
        for n in names
    }
    constexprs = {(names.index(n),): v for n, v in consts.items() if n in names}
    os.environ["TRITON_CACHE_DIR"] = scratch_dir("kz-compile-cache-")  # nothing cached
    t = time.perf_counter()
    compiled = triton.compile(
        ASTSource(fn, signature=signature, constexprs=constexprs), target=GPUTarget("cuda", capability, 32)
    )
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "ptx_lines": compiled.asm["ptx"].count("\n")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("items", nargs="*", help="FILE KERNEL pairs")
    parser.add_argument("--const", action="append", default=[], help="NAME=INT constexpr")
    parser.add_argument("--float", action="append", default=[], help="an fp32 scalar argument")
    parser.add_argument("--conv-solutions", action="store_true", help="the built-in level-2 conv solutions")
    parser.add_argument("--capability", type=int, default=90, help="90: sm_90 (H100/H200)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "0"
    if len(args.items) % 2:
        parser.error("give FILE KERNEL pairs")
    consts = {k: int(v) for k, v in (c.split("=", 1) for c in args.const)}
    work = [(Path(f), k, consts, set(args.float)) for f, k in zip(args.items[::2], args.items[1::2])]
    if args.conv_solutions:
        work += [(CONV / f, k, CONV_CONSTS, CONV_FLOATS) for f, k in CONV_SOLUTIONS]
    if not work:
        parser.error("nothing to compile: give FILE KERNEL pairs or --conv-solutions")
    missing = [path for path, *_ in work if not path.exists()]
    if missing:
        print(f"error: {missing[0]} does not exist", file=sys.stderr)
        return 2
    rows: list[dict] = []
    try:
        with sigterm_raises():
            for path, kernel, kconsts, floats in work:
                runs = [compile_once(path, kernel, kconsts, floats, args.capability) for _ in range(args.repeats)]
                row = {
                    "file": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                    "kernel": kernel,
                    "median_s": round(statistics.median(r["seconds"] for r in runs), 3),
                    "ptx_lines": runs[0]["ptx_lines"],
                }
                rows.append(row)
                print(f"{row['file']}:{kernel} {row['median_s']} s, {row['ptx_lines']} PTX lines", file=sys.stderr)
    except (Terminated, KeyboardInterrupt) as exc:
        return cut_short("triton_compile.py", args.out, exc, lambda: triton_compile_report(rows, args, partial=True))
    return complete(triton_compile_report(rows, args, partial=False), args.out)


def triton_compile_report(rows: list[dict], args, partial: bool) -> dict:
    """The report of the kernels compiled (``rows``: one per kernel, fewer in a run cut short)."""
    import triton

    return {
        "bench": "triton-compile",
        "partial": partial,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.node(),
        "cpu_count": os.cpu_count(),
        "triton": triton.__version__,
        "target": f"sm_{args.capability}",
        "repeats": args.repeats,
        "results": rows,
    }


if __name__ == "__main__":
    sys.exit(main())
