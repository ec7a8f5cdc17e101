"""What the evaluator's per-pair work costs at a given output size, piece by piece: the output check a checked
pair makes (``kz_check_outputs`` elementwise, then the core's relative-error check), the copy of the candidate's
outputs (`snapshot`), and a timed pair's new input contents (a ``get_inputs``-like draw and its copy into both
sides' buffers). Each piece is timed on the host with the device synchronized, median of ``--repeats``.

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


def measure(numel: int, device: str, repeats: int) -> dict:
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
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1048576,16777216,268435456", help="output elements (fp32), comma-separated")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        rows.append(measure(n, device, args.repeats))
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
