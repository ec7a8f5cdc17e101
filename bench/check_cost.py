"""What the evaluator's per-pair work costs at a given output size, piece by piece: the output check a checked
pair makes (``kz_check_outputs`` elementwise, then the core's relative-error check), the copy of the candidate's
outputs (`snapshot`), a timed pair's new input contents (a ``get_inputs``-like draw and its copy into both
sides' buffers), and the spot check every timed pair gets (`kzcore.evaluate.spots`: both sides' gathers, the
comparison, and the one read of the counts a timing makes, here per pair: an upper bound). Each piece is timed on the host with the device synchronized, median of ``--repeats``.

The plain figures are the core's torch check (no plugin answering). ``--fused`` also times the whole check with
kz_triton's one-pass kernel answering its fast path (`kz_triton.check`: one read of each output gives the
elements out of tolerance, the largest absolute and relative errors and the relative-error norms), which GPU
workers use, and records whether its verdicts agree with the torch check's on a passing output, one with a
single element out of tolerance, one with a NaN and one small everywhere.

    python -m bench run check_cost --out bench/results/check-cost.json                 (GPU)
    python -m bench run check_cost --device cpu --sizes 65536 --repeats 3               (smoke: not a figure)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import write_json_atomic  # noqa: E402
from kzcore import hookimpl  # noqa: E402


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


class OnePass:
    """A plugin whose ``kz_check_outputs`` is the core's check with kz_triton's one-pass kernel answering the
    elementwise fast path (on a GPU, the kernel warmed as a worker warms it; on a CPU, under the interpreter)."""

    def __init__(self, device: str):
        from kz_triton import check

        if device == "cuda":
            check.warm(device)
            self.summarise = check.summarise
        else:
            self.summarise = lambda e, a, atol, rtol: check.summary(e.reshape(-1), a.reshape(-1), atol, rtol)

    @hookimpl(tryfirst=True)
    def kz_check_outputs(self, expected, actual, config):
        from kzcore.builtins.outputs import compare

        return compare(expected, actual, config, summarise=self.summarise)

    kz_check_outputs.elementwise = True  # the core's rule: the timed pairs' spot checks apply


def fused_agreement(pm, one_pass, config, numel: int, device: str) -> dict:
    """Whether the one-pass check's verdict matches the torch check's on four outputs: passing, one element
    out, one NaN, and small everywhere (zeros for a softmax)."""
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
        out[name] = {
            "evaluator": check_outputs(pm, [ref], [actual], config).ok,
            "fused": check_outputs(one_pass, [ref], [actual], config).ok,
        }
    out["agree"] = all(v["evaluator"] == v["fused"] for v in out.values())
    return out


def measure(numel: int, device: str, repeats: int, fused: bool = False) -> dict:
    import torch

    from kzcore.evaluate import magnitude
    from kzcore.evaluate.checking import check_outputs
    from kzcore.evaluate.spots import SpotCheck
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

    spots = SpotCheck(config.tolerance_for, config.timed_spots)

    def spot_pair() -> None:
        spots.begin()
        spots.take("reference", expected)
        spots.take("candidate", actual)
        spots.end("timed pair")
        assert spots.verify() == ""

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
        "spots_s": seconds(spot_pair, sync, repeats),
    }
    if fused:
        one_pass = new_plugin_manager(load_entry_points=False)
        one_pass.register(OnePass(device))
        check_outputs(one_pass, expected, actual, config)  # compiled outside the timing (CPU)
        out["fused_s"] = seconds(lambda: check_outputs(one_pass, expected, actual, config), sync, repeats)
        out["fused_agreement"] = fused_agreement(pm, one_pass, config, numel, device)
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1048576,16777216,268435456", help="output elements (fp32), comma-separated")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--fused", action="store_true", help="also time the check with kz_triton's one-pass kernel (see above)"
    )
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
