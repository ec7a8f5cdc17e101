"""What the evaluator's per-pair work costs at a given output size, piece by piece: the output check a checked
pair makes (``kz_check_outputs`` elementwise, then the core's relative-error check), the copy of the candidate's
outputs (`snapshot`), and a timed pair's new input contents (a ``get_inputs``-like draw and its copy into both
sides' buffers). Each piece is timed on the host with the device synchronized, median of ``--repeats``.

``--fused`` also times a candidate replacement, not used by the evaluator: one Triton kernel that reads each
output once and returns what both checks need (elements out of tolerance, the largest absolute and relative
errors, and the two sums of squares of the error-norm check), and records whether its verdicts agree with
the evaluator's on a passing output, one with a single element out of tolerance, one with a NaN and one small
everywhere. Whether the evaluator should take it up is for these figures to say.

    python -m bench run check_cost --out bench/results/check-cost.json                 (GPU)
    python -m bench run check_cost --device cpu --sizes 65536 --repeats 3               (smoke: not a figure)
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import write_json_atomic  # noqa: E402


def seconds(fn, sync, repeats: int) -> float:
    """Median wall seconds of ``fn()``, the device synchronized before and after each call."""
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def fused_check(e, a, atol: float, rtol: float) -> dict:
    """One pass over fp32-or-narrower outputs ``e`` (reference) and ``a``: elements outside ``atol + rtol*|e|``
    (NaN counts as outside), the largest absolute and relative errors, and the sums of squares of ``a - e`` and
    of ``e`` over the elements where ``e`` is finite; per-block partials reduced on the host side in fp64."""
    import torch
    import triton

    e, a = e.contiguous().view(-1), a.contiguous().view(-1)
    n = e.numel()
    block = 4096
    blocks = triton.cdiv(n, block)
    partial = torch.empty(blocks, 5, dtype=torch.float32, device=e.device)
    _fused_kernel()[(blocks,)](a, e, n, atol, rtol, partial, BLOCK=block)
    totals = partial.double()
    err_sq, ref_sq = float(totals[:, 3].sum()), float(totals[:, 4].sum())
    return {
        "out": int(totals[:, 0].sum().item()),
        "max_abs": float(totals[:, 1].max()),
        "max_rel": float(totals[:, 2].max()),
        "rel_err": (err_sq / ref_sq) ** 0.5 if ref_sq else None,
    }


@functools.cache
def _fused_kernel():
    """The kernel, defined once per process (at first use: importing this bench needs no triton)."""
    import triton
    import triton.language as tl

    @triton.jit
    def check_kernel(a_ptr, e_ptr, n, atol, rtol, out_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        diff = tl.abs(a - e)
        size = tl.abs(e)
        within = diff <= size * rtol + atol
        outside = mask & (within == 0)
        rel = diff / tl.maximum(size, atol)
        finite = (e == e) & (size < float("inf"))
        d = tl.where(finite & mask, a - e, 0.0)
        r = tl.where(finite & mask, e, 0.0)
        tl.store(out_ptr + pid * 5 + 0, tl.sum(outside.to(tl.float32), axis=0))
        tl.store(out_ptr + pid * 5 + 1, tl.max(tl.where(mask, diff, 0.0), axis=0))
        tl.store(out_ptr + pid * 5 + 2, tl.max(tl.where(mask, rel, 0.0), axis=0))
        tl.store(out_ptr + pid * 5 + 3, tl.sum(d * d, axis=0))
        tl.store(out_ptr + pid * 5 + 4, tl.sum(r * r, axis=0))

    return check_kernel


def fused_agreement(pm, config, numel: int, device: str) -> dict:
    """Whether the fused check's verdict (nothing outside tolerance and the error norm within rtol) matches the
    evaluator's on four outputs: passing, one element out, one NaN, and small everywhere (zeros for a softmax)."""
    import torch

    from kzcore.evaluate.checking import check_outputs

    torch.manual_seed(0)
    e = torch.randn(numel, device=device)
    cases = {"passing": e + 1e-4 * torch.randn_like(e), "one_out": e.clone(), "nan": e.clone()}
    cases["one_out"][numel // 2] += 1.0
    cases["nan"][numel // 3] = float("nan")
    small = torch.softmax(torch.randn(max(numel // 4096, 1), 4096, device=device), dim=1).view(-1)
    out = {}
    for name, (ref, actual) in {
        **{k: (e, v) for k, v in cases.items()},
        "small": (small, torch.zeros_like(small)),
    }.items():
        fused = fused_check(ref, actual, config.atol, config.rtol)
        rel = fused["rel_err"]
        fused_ok = fused["out"] == 0 and rel is not None and rel <= config.rtol
        out[name] = {"evaluator": check_outputs(pm, [ref], [actual], config).ok, "fused": fused_ok}
    out["agree"] = all(v["evaluator"] == v["fused"] for v in out.values())
    return out


def measure(numel: int, device: str, repeats: int, fused: bool = False) -> dict:
    import torch

    from kzcore.evaluate import magnitude
    from kzcore.evaluate.checking import check_outputs
    from kzcore.evaluate.tensors import refill_in_place, snapshot
    from kzcore.plugins import new_plugin_manager
    from kzcore.types import EvalConfig

    pm = new_plugin_manager(load_entry_points=False)
    config = EvalConfig(device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    expected = [torch.randn(numel, device=device)]
    actual = [expected[0] + 1e-4 * torch.randn(numel, device=device)]
    ref_buf, cand_buf = [torch.empty(numel, device=device)], [torch.empty(numel, device=device)]

    def draw_and_refill() -> None:
        values = [torch.randn(numel, device=device)]
        refill_in_place(ref_buf, values)
        refill_in_place(cand_buf, values)

    assert check_outputs(pm, expected, actual, config).ok
    out = {
        "numel": numel,
        "mib": round(numel * 4 / 2**20, 1),
        "check_s": seconds(lambda: check_outputs(pm, expected, actual, config), sync, repeats),
        "elementwise_s": seconds(
            lambda: pm.hook.kz_check_outputs(expected=expected, actual=actual, config=config), sync, repeats
        ),
        "relative_error_s": seconds(lambda: magnitude.relative_errors(expected, actual), sync, repeats),
        "snapshot_s": seconds(lambda: snapshot(actual), sync, repeats),
        "draw_refill_s": seconds(draw_and_refill, sync, repeats),
    }
    if fused:
        fused_check(expected[0], actual[0], config.atol, config.rtol)  # compiled outside the timing
        out["fused_s"] = seconds(lambda: fused_check(expected[0], actual[0], config.atol, config.rtol), sync, repeats)
        out["fused_agreement"] = fused_agreement(pm, config, numel, device)
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1048576,16777216,268435456", help="output elements (fp32), comma-separated")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--fused", action="store_true", help="also time a one-pass Triton check (see above)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        rows.append(measure(n, device, args.repeats, args.fused))
        print(json.dumps(rows[-1]), file=sys.stderr)
    report = {
        "bench": "check_cost",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "smoke": device != "cuda",
        "rows": rows,
    }
    if args.out:
        write_json_atomic(args.out, report)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
