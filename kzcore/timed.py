"""The timed pairs are checked like trials: what a timer hands the candidate and what it gets back.

A timer (``kz_time_candidate``) runs reference and candidate in pairs. Around each pair it calls a
`TimedRounds`: ``begin()`` before the pair (the next placement of the inputs in turn, and new input contents for
both sides, drawn from the problem's own ``get_inputs`` on a seed nobody can predict, so no result cache keyed
on input values or pointers can hit), ``took(side, outputs, ms)`` after each call (the device synchronized), and
``end()`` after the pair. A pair drawn for a check (each with probability ``share``, from the operating
system's randomness, and always the last one) has the candidate's outputs copied at once, before the reference
runs, and compared with the reference's on the same inputs by the trials' own checker; a mismatch raises
`TimedCheckFailed`. Every pair keeps both sides' outputs until its end, so nothing a candidate can observe
during a call tells a checked pair from another. With ``spots`` (`kzcore.evaluate.spots.SpotCheck`) every
pair is also compared at positions drawn for it, each side's values copied right after its call; the timer's
the core reads those once the timer has returned (``finish()``). After every candidate call the evaluator's
problem watch runs (``after_candidate``: the reference, its module, hooks and sampled weights unchanged), and on
a GPU a checked pair also reads the caching allocator's statistics around the candidate's call (``allocator``:
memory given back to the device would make the reference's next allocations cudaMalloc inside its timing).

The pairs go round the placements (the same values in other device memory, `kzcore.evaluate.placement`): one
timer call covers them all, so the GPU is settled, the calls warmed up and the launch cover learnt once per
timing, and a stop once the medians are known applies to the whole timing. A timer that hands each sample to
``took`` lets the core keep each placement's median (`TimedRounds.samples`).

Neighbours: `kzcore.evaluate.timing` builds one per timing; `kzcore.builtins.timing` drives it."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence

from kzcore.errors import TimedCheckFailed

SIDES = ("reference", "candidate")


def spread(samples: list[float]) -> float:
    """Interquartile range over median: a robust relative spread (0 under 4 samples)."""
    if len(samples) < 4:
        return 0.0
    q1, _q2, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / statistics.median(samples)


class TimedRounds:
    """Input contents and output checks around a timer's pairs, over the placements of the inputs.

    ``ref_placed`` and ``cand_placed`` hold one input list per placement (indexable: ``ref_placed[j]`` is placement
    j's list; `kzcore.evaluate.placement.Placements` fills a view placement as it is indexed). Pair i runs on
    placement i mod their number; ``ref_inputs`` and ``cand_inputs`` are the current placement's lists (placement 0
    before the first pair: what warm-up calls use), and the timed callables read them. ``draw(seed)`` returns new
    input values; they are copied into the current placement of both sides in place. ``check(expected, actual,
    where)`` raises `TimedCheckFailed` when the candidate's outputs are wrong; ``snapshot(outputs)`` validates and
    copies the candidate's outputs (refusing what it does not own). ``share``: the probability that a pair is
    checked; the last pair always is. ``spots``: a `kzcore.evaluate.spots.SpotCheck` for every pair (None: none).
    ``refill_share``: the share of each large input whose contents are redrawn per pair, as one random span (1:
    all of it; less only with ``spots``, which catch a cache that hits on the unchanged rest). ``after_candidate``:
    called after every candidate call of every pair, outside the timed region, before the pair's other call (the
    evaluator's problem watch: a hook a candidate's call leaves for the reference's next call is there then); it
    raises `TimedCheckFailed` to stop the timing. ``allocator``: on a checked pair, marked (``mark()``) before the
    candidate's call and asked after it what that call gave back to the device (``released()``, in words): the
    reference's allocations in its next timed call would then pay cudaMalloc (`kzcore.evaluate.memory.ReleaseWatch`;
    None on a CPU)."""

    def __init__(
        self,
        draw: Callable[[int], list] | None,
        ref_placed: Sequence[list],
        cand_placed: Sequence[list],
        check: Callable[[list, list, str], None],
        snapshot: Callable[[list], list],
        share: float,
        rng: random.Random | None = None,
        spots=None,
        refill_share: float = 1.0,
        after_candidate: Callable[[], None] | None = None,
        allocator=None,
    ):
        if len(ref_placed) != len(cand_placed) or not len(ref_placed):
            raise ValueError(f"{len(ref_placed)} reference and {len(cand_placed)} candidate placements")
        self.draw, self.ref_placed, self.cand_placed = draw, ref_placed, cand_placed
        self.check, self.snapshot, self.share, self.spots = check, snapshot, share, spots
        if not 0 < refill_share <= 1 or (refill_share < 1 and spots is None):
            raise ValueError(f"refill_share {refill_share}: in (0, 1], and below 1 only with spot checks")
        self.refill_share = refill_share
        self.after_candidate = after_candidate
        self.allocator = allocator
        self.rng = rng or random.SystemRandom()
        self.placements = len(ref_placed)
        self.index = 0
        self.ref_inputs, self.cand_inputs = ref_placed[0], cand_placed[0]
        self.pairs = self.checked = 0
        self.last_checked = False
        self._checking = False
        self._outputs: dict[str, list] = {}
        # per side, per placement: the samples (ms) the timer handed to `took`
        self.samples: dict[str, list[list[float]]] = {side: [[] for _ in ref_placed] for side in SIDES}

    def begin(self, last: bool = False, check: bool | None = None) -> None:
        """Before a pair, outside the timed region: the next placement, new contents in both sides' inputs, and
        whether to check the pair: always the ``last``, else as ``check`` says or, by default, with probability
        ``share``."""
        from kzcore.evaluate.tensors import refill_in_place, refill_plan

        self.index = self.pairs % self.placements
        self.ref_inputs, self.cand_inputs = self.ref_placed[self.index], self.cand_placed[self.index]
        if self.draw is not None:
            values = self.draw(self.rng.getrandbits(31))
            part = refill_plan(values, self.refill_share, self.rng)
            refill_in_place(self.ref_inputs, values, part)
            refill_in_place(self.cand_inputs, values, part)
        self.pairs += 1
        self._checking = last or (check if check is not None else self.rng.random() < self.share)
        self.last_checked = last
        self._outputs = {}
        if self.spots is not None:
            self.spots.begin()
        if self._checking and self.allocator is not None:
            self.allocator.mark()

    def set_aside_samples(self) -> dict[str, list[list[float]]]:
        """The samples handed over so far, replaced by empty lists: a timer that times a second pass and keeps
        one of the two puts back the first pass's (``rounds.samples = ...``) when it keeps that one."""
        samples, self.samples = self.samples, {side: [[] for _ in self.ref_placed] for side in SIDES}
        return samples

    def took(self, side: str, outputs, ms: float | None = None) -> None:
        """After one call of the pair, the device synchronized: keep what it returned until `end`; a checked
        pair's candidate outputs are validated and copied now, before anything else runs. ``ms``: the call's
        timed sample, kept per placement (`samples`)."""
        from kzcore.evaluate.tensors import as_list

        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, not {side!r}")
        outputs = as_list(outputs)
        if self._checking and self.allocator is not None:
            if side == "reference":
                self.allocator.mark()  # the reference went first: the candidate's call starts from here
            else:
                self._check_released()
        if self._checking and side == "candidate":
            outputs = self.snapshot(outputs)
        if side == "candidate" and self.after_candidate is not None:
            self.after_candidate()
        if self.spots is not None:
            self.spots.take(side, outputs)
        self._outputs[side] = outputs
        if ms is not None:
            self.samples[side][self.index].append(ms)

    def _check_released(self) -> None:
        freed = self.allocator.released()
        if freed:
            raise TimedCheckFailed(
                f"timed pair {self.pairs}: the candidate's call gave the caching allocator's memory back to the device "
                f"({freed}; torch.cuda.empty_cache?), so the reference's next allocations would pay cudaMalloc "
                "inside its timed call"
            )

    def end(self) -> None:
        """After the pair: queue its spot check, compare a checked pair's outputs (raises `TimedCheckFailed`);
        drop them all."""
        outputs, self._outputs = self._outputs, {}
        where = f"timed pair {self.pairs}"
        if self.placements > 1:
            where += f" (placement {self.index + 1} of {self.placements})"
        if self.spots is not None:
            self.spots.end(where, group=self.index)
        if not self._checking:
            return
        missing = [side for side in SIDES if side not in outputs]
        if missing:
            raise RuntimeError(f"the timer did not hand over the {' and '.join(missing)} outputs of a timed pair")
        self.checked += 1
        self.check(outputs["reference"], outputs["candidate"], where + (", the last" if self.last_checked else ""))

    def finish(self) -> None:
        """After the timer returned: read the spot checks of every pair (raises `TimedCheckFailed` naming the
        first pair whose candidate outputs differ)."""
        if self.spots is not None:
            message = self.spots.verify()
            if message:
                raise TimedCheckFailed(message)


def run_pair(rounds: TimedRounds | None, calls: list[tuple[str, Callable[[], float]]], last: bool = False) -> dict:
    """One pair through ``rounds`` (None: no rounds, just the calls): ``calls`` are (side, call) in the order to
    run, each call returning its sample and handing its outputs to ``rounds.took``. Returns side -> sample."""
    if rounds is not None:
        rounds.begin(last=last)
    samples = {side: call() for side, call in calls}
    if rounds is not None:
        rounds.end()
    return samples


__all__ = ["TimedRounds", "TimedCheckFailed", "run_pair", "spread"]
