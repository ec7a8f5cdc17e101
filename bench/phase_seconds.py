"""Each phase's wall and CPU seconds of a `kz train` run, as JSON: the demo's (configs/smoke.toml) by default,
so that the next slowdown shows as a number beside the last one. CPU seconds count the trainer's process and its
children (the evaluator's workers included), as `kz train` records them in RUN/state.json.

    python -m bench run phase_seconds                # the demo's run directory as it is (runs/smoke)
    python -m bench run phase_seconds --run --out bench/results/DATE-cpu-phase-seconds.json   # the demo afresh first
    python -m bench run phase_seconds --config configs/gpu-small.toml --run-dir runs/gpu-small

With ``--run`` the demo runs into a new temporary directory (``--run-dir`` to choose it) and is timed whole.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEMO = ROOT / "configs" / "smoke.toml"
TRAINING_PACKAGES = ("transformers", "trl", "accelerate", "datasets", "tokenizers", "safetensors")
PHASE_KEYS = ("seconds", "cpu_seconds", "train_seconds", "generation_seconds", "eval_seconds", "resumed_at_step")


def phase_report(run_dir: Path) -> dict:
    """Per finished phase of the run in ``run_dir``: wall and CPU seconds (and the trainer's own splits where the
    phase has them), in schedule order; totals over the phases."""
    from kzcore.train.schedule import read_state

    state = read_state(run_dir)
    if not state["done"]:
        raise SystemExit(f"phase_seconds.py: {run_dir} has no finished phase (run the config first, or --run)")
    phases = {
        pid: {k: state["metrics"].get(pid, {}).get(k) for k in PHASE_KEYS if k in state["metrics"].get(pid, {})}
        for pid in state["done"]
    }
    cpu = [p.get("cpu_seconds") for p in phases.values()]
    return {
        "phases": phases,
        "seconds": round(sum(p.get("seconds", 0.0) for p in phases.values()), 3),
        # None when a phase was recorded without its CPU seconds (a run older than the record)
        "cpu_seconds": None if None in cpu else round(sum(cpu), 3),
    }


def versions() -> dict[str, str]:
    """kzcore's tracked packages and the training libraries (a slowdown can come with a new release of one)."""
    from importlib import metadata

    from kzcore.results import package_versions

    found = package_versions()
    for name in TRAINING_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(DEMO), help="trainer config (default: the demo's)")
    parser.add_argument("--run-dir", default=None, help="the run directory (default: the config's [run] dir)")
    parser.add_argument("--run", action="store_true", help="run `kz train` first, into a new run directory")
    parser.add_argument("--out", default=None, help="also write the report here")
    args = parser.parse_args(argv)

    from bench.report import write_json_atomic
    from kzcore.train.config import load_config

    config = load_config(Path(args.config))
    run_dir = Path(args.run_dir or config.run.dir)
    report: dict = {"bench": "phase_seconds", "config": args.config, "run_dir": str(run_dir)}
    if args.run:
        run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="kz-phase-seconds-"))
        report["run_dir"] = str(run_dir)
        command = [
            str(Path(sys.executable).with_name("kz")),
            "train",
            "--config",
            args.config,
            "--run-dir",
            str(run_dir),
        ]
        t0 = time.perf_counter()
        # the run's log to stderr: stdout carries the report alone
        done = subprocess.run(command, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=sys.stderr)
        report["command_seconds"] = round(time.perf_counter() - t0, 3)  # start-up and plots included
        if done.returncode != 0:
            print(f"phase_seconds.py: kz train exited {done.returncode}", file=sys.stderr)
            return done.returncode
    report.update(
        time=time.strftime("%Y-%m-%dT%H:%M:%S%z"), machine=platform.node(), cpus=os.cpu_count(),
        packages=versions(), **phase_report(run_dir),
    )  # fmt: skip
    print(json.dumps(report, indent=2))
    if args.out:
        write_json_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
