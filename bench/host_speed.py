"""How fast this host runs the evaluator's host-side work: recorded beside a per-candidate latency or a
throughput figure, so that a change between two machines can be told from a change in the code.

Every evaluation spends part of its time on the host (the static check, Python around each call, launches). Two
fresh machines of one kind have run that part twice as fast as each other, which moves a per-candidate median
as much as a code change does. `probe` measures two fixed workloads, each the median of ``repeats`` runs:

  static_check_ms   the Triton language's static check of the built-in suite's Triton solution of
                    19_Matmul (parse, walk, name resolution): the largest host-side stage that does not touch
                    the GPU
  python_ms         a fixed pure-Python loop (dict and attribute work, no allocation of tensors)

Compare a figure with another machine's only with these beside it; the figures are host speed, not kzcore's.

    python -m bench run host_speed [--repeats N] [--out FILE]     prints (or writes) the JSON
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `python bench/host_speed.py` finds its siblings as `python -m bench` does

from bench.report import write_json_atomic  # noqa: E402

PROBLEM = "19_Matmul"


def _python_work() -> int:
    total, table = 0, {}
    for i in range(200_000):
        table[i & 1023] = table.get(i & 1023, 0) + i
        total += len(table) ^ i
    return total


def _median_ms(fn, repeats: int) -> float:
    fn()  # first call: imports and caches, not counted
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 3)


def probe(repeats: int = 15, pm=None) -> dict:
    """The two workloads' medians (ms), the repeats, the processor's name and count. ``pm``: a plugin manager
    with the Triton language registered (None: one is made). A check that cannot run (no Triton plugin, no
    such solution) is left out with its reason under ``"skipped"``, never guessed."""
    import os

    out: dict = {"repeats": repeats, "processor": platform.processor() or platform.machine(),
                 "cpus": os.cpu_count()}  # fmt: skip
    out["python_ms"] = _median_ms(_python_work, repeats)
    try:
        if pm is None:
            from kzcore.plugins import new_plugin_manager

            pm = new_plugin_manager(load_entry_points=False, extra=["kz_triton", "kz_suites"])
        from kzcore.problems import load_problems, load_solutions

        problems = [p for p in load_problems("builtin", pm=pm) if p.name == PROBLEM]
        (solution,) = load_solutions("builtin", problems, "triton", pm=pm)
    except Exception as exc:  # noqa: BLE001 (a probe that cannot run says why)
        out["skipped"] = f"static_check_ms: {type(exc).__name__}: {exc}"
        return out

    def check() -> None:  # each run parses and walks afresh, as a new candidate's source does
        pm.hook.kz_static_check(language="triton", source=solution.source)

    out["static_check_ms"] = _median_ms(check, repeats)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="runs of each workload (the median is kept)")
    parser.add_argument("--out", default=None, help="write the JSON here (default: print it)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    report = {"bench": "host_speed", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
              **probe(args.repeats)}  # fmt: skip
    if args.out:
        write_json_atomic(args.out, report)
    else:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
