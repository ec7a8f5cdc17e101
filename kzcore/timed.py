"""The timed pairs are checked like trials: what a timer hands the candidate and what it gets back.

A timer (``kz_time_candidate``) runs reference and candidate in pairs. Around each pair it calls a
`TimedRounds`: ``begin()`` before the pair (new input contents for both sides, drawn from the problem's own
``get_inputs`` on a seed nobody can predict, so no result cache keyed on input values or pointers can hit),
``took(side, outputs)`` after each call (the device synchronized), and ``end()`` after the pair. A pair drawn
for a check (each with probability ``share``, from the operating system's randomness, and always the last one)
has the candidate's outputs copied at once, before the reference runs, and compared with the reference's on
the same inputs by the trials' own checker; a mismatch raises `TimedCheckFailed`. Every pair keeps both sides'
outputs until its end, so nothing a candidate can observe during a call tells a checked pair from another.

Neighbours: `kzcore.evaluate.timing` builds one per placement; `kzcore.builtins.timing` drives it."""

from __future__ import annotations

import random
from collections.abc import Callable

from kzcore.errors import TimedCheckFailed

SIDES = ("reference", "candidate")


class TimedRounds:
    """Input contents and output checks around a timer's pairs, for one placement of the inputs.

    ``draw(seed)`` returns new input values; they are copied into ``ref_inputs`` and ``cand_inputs`` in place
    (the timed callables close over those lists). ``check(expected, actual, label)`` raises `TimedCheckFailed`
    when the candidate's outputs are wrong; ``snapshot(outputs)`` validates and copies the candidate's outputs
    (refusing what it does not own). ``share``: the probability that a pair is checked; the last always is when
    ``final`` (the timing's last placement; earlier placements' last pairs are drawn like the others)."""

    def __init__(
        self,
        draw: Callable[[int], list] | None,
        ref_inputs: list,
        cand_inputs: list,
        check: Callable[[list, list, str], None],
        snapshot: Callable[[list], list],
        share: float,
        rng: random.Random | None = None,
        label: str = "",
        final: bool = True,
    ):
        self.draw, self.ref_inputs, self.cand_inputs = draw, ref_inputs, cand_inputs
        self.check, self.snapshot, self.share = check, snapshot, share
        self.rng = rng or random.SystemRandom()
        self.label, self.final = label, final
        self.pairs = self.checked = 0
        self.last_checked = False
        self._checking = False
        self._outputs: dict[str, list] = {}

    def begin(self, last: bool = False, check: bool | None = None) -> None:
        """Before a pair, outside the timed region: new contents in both sides' inputs, and whether to check the
        pair: always the ``last``, else as ``check`` says or, by default, with probability ``share``."""
        from kzcore.evaluate.tensors import refill_in_place

        if self.draw is not None:
            values = self.draw(self.rng.getrandbits(31))
            refill_in_place(self.ref_inputs, values)
            refill_in_place(self.cand_inputs, values)
        self.pairs += 1
        forced = last and self.final
        self._checking = forced or (check if check is not None else self.rng.random() < self.share)
        self.last_checked = last
        self._outputs = {}

    def took(self, side: str, outputs) -> None:
        """After one call of the pair, the device synchronized: keep what it returned until `end`; a checked
        pair's candidate outputs are validated and copied now, before anything else runs."""
        from kzcore.evaluate.tensors import as_list

        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, not {side!r}")
        outputs = as_list(outputs)
        if self._checking and side == "candidate":
            outputs = self.snapshot(outputs)
        self._outputs[side] = outputs

    def end(self) -> None:
        """After the pair: compare a checked pair's outputs (raises `TimedCheckFailed`); drop them all."""
        outputs, self._outputs = self._outputs, {}
        if not self._checking:
            return
        missing = [side for side in SIDES if side not in outputs]
        if missing:
            raise RuntimeError(f"the timer did not hand over the {' and '.join(missing)} outputs of a timed pair")
        self.checked += 1
        where = f"timed pair {self.pairs}" + (f" ({self.label})" if self.label else "")
        self.check(outputs["reference"], outputs["candidate"], where + (", the last" if self.last_checked else ""))


def run_pair(rounds: TimedRounds | None, calls: list[tuple[str, Callable[[], float]]], last: bool = False) -> dict:
    """One pair through ``rounds`` (None: no rounds, just the calls): ``calls`` are (side, call) in the order to
    run, each call returning its sample and handing its outputs to ``rounds.took``. Returns side -> sample."""
    if rounds is not None:
        rounds.begin(last=last)
    samples = {side: call() for side, call in calls}
    if rounds is not None:
        rounds.end()
    return samples


__all__ = ["TimedRounds", "TimedCheckFailed", "run_pair"]
