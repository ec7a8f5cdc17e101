"""The benches ``python -m bench`` knows: each one's name (its module, bench/NAME.py), what it needs and one line on
what it measures. The table is read without importing any bench module, so listing them imports neither torch nor
triton; a bench's module is imported when it runs. Neighbours: `bench.__main__` (the entry point) and the bench
modules, each with ``main(argv: list[str] | None = None) -> int`` that parses ``argv`` as its command line."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import attrs

# where a bench's figures mean something: any machine; one CUDA GPU (elsewhere it runs, if at all, as a smoke run
# with no performance figure); two or more GPUs of one host
NEEDS = ("cpu", "gpu", "gpus>=2")
HERE = Path(__file__).resolve().parent


@attrs.frozen
class Bench:
    """One bench: ``name`` is its module in bench/ (the name ``python -m bench run`` takes)."""

    name: str
    needs: str = attrs.field(validator=attrs.validators.in_(NEEDS))
    description: str

    @property
    def path(self) -> Path:
        return HERE / f"{self.name}.py"

    def load(self) -> Callable[[list[str] | None], int]:
        """The bench's ``main``, its module imported now (with whatever it imports)."""
        return importlib.import_module(f"bench.{self.name}").main

    def run(self, argv: list[str]) -> int:
        """``main(argv)`` with ``sys.argv`` as ``python bench/NAME.py ARGV`` would have it, so that usage and error
        lines name the bench's file as before; argparse's exits (--help, a bad option) pass through."""
        main = self.load()
        saved = sys.argv
        sys.argv = [str(self.path), *argv]
        try:
            return main(list(argv))
        finally:
            sys.argv = saved


BENCHES = (
    Bench(
        "check_cost", "gpu", "a timed pair's output check, output copy and input draw by size (--fused: one-pass check)"
    ),
    Bench("cuda_compile", "cpu", "NVRTC compile latency of the built-in CUDA solutions (--inline: load_inline too)"),
    Bench("faults", "cpu", "fault tolerance: faulty, cheating and good candidates through one worker pool"),
    Bench("harness", "gpu", "evaluator throughput and latency, built-in Triton solutions (--scaling: 1 vs all GPUs)"),
    Bench("host_speed", "cpu", "how fast this host runs the evaluator's host-side work (beside latency figures)"),
    Bench("interference_probe", "gpu", "does another process's memory or module traffic slow the kernels timed here"),
    Bench("phase_seconds", "cpu", "wall and CPU seconds of each phase of a `kz train` run (the demo's by default)"),
    Bench("placement_probe", "gpu", "does a kernel's speed depend on where its inputs lie in device memory"),
    Bench("profile_report", "cpu", "merge the per-job cProfiles of KZ_WORKER_PROFILE=DIR and print the top functions"),
    Bench("sampling", "cpu", "the hf policy's sampling speed (tokens/s) at several batch sizes"),
    Bench("side_by_side", "gpu", "two kz eval runs on one GPU, with and without the host-wide GPU lock, vs alone"),
    Bench("schedule", "cpu", "one batch dispatched first-in-first-out vs longest expected first: wall time and drain"),
    Bench("throughput", "gpu", "one batch of 72 short kernels through 1 and through N workers per GPU: the speedup"),
    Bench("timing", "gpu", "timing fidelity of the evaluator and its defences' cost (--ground-truth: vs do_bench)"),
    Bench("train_step", "cpu", "seconds per Coder GRPO step (generation, evaluation, update), rollouts per minute"),
    Bench("triton_compile", "cpu", "Triton compile time of kernels for a chosen GPU architecture (no GPU needed)"),
)
BY_NAME = {bench.name: bench for bench in BENCHES}


class UnknownBench(LookupError):
    """A name no bench has; the message names the known ones."""


def get(name: str) -> Bench:
    """The bench called ``name``; `UnknownBench` names the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise UnknownBench(f"unknown bench {name!r} (known: {', '.join(BY_NAME)})") from None
