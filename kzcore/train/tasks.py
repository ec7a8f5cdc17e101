"""The problems of a training run and the draws from them: the held-out problems, the cold start's, the
``[problems] tasks`` problems, the task pool's accepted modules, ``[heldout] decontaminate`` between them, the
Coder's measured pass rates (``RUN/task_rates.jsonl``) and the draw of each Coder phase's prompts. The trainer
(kzcore.train.trainer) asks; the Proposer phase (kzcore.train.proposer_phase) reads the tasks and their rates
to weight its API draw."""

from __future__ import annotations

import json
import random
from pathlib import Path

import attrs

from kzcore.decontam import Report, decontaminate, label
from kzcore.errors import KzError
from kzcore.jsonl import append_jsonl, read_jsonl, write_text_atomic
from kzcore.problems import load_problems
from kzcore.rewards import frontier_reward
from kzcore.train.config import COLDSTART_TASKS, TrainConfig
from kzcore.train.context import RunContext
from kzcore.train.distill import PROBLEMS_FILE, allowed_chains, allowed_variants
from kzcore.types import Phase, Problem

TASK_RATES = "task_rates.jsonl"
TASK_POOL = "pool.jsonl"  # RUN/pool.jsonl: every module the Proposer phases proposed, with its verdicts
DECONTAMINATION = "decontamination.json"  # RUN/decontamination.json: [heldout] decontaminate's report
COMPOSED = "composed.jsonl"  # RUN/composed.jsonl: [proposer] cold_start_modules = "compose"'s modules
COMPOSE = "compose"
HELDOUT_CHECK = "heldout-problems.json"  # RUN/heldout-problems.json: the held-out problems the problem check kept


def heldout_problems(config: TrainConfig, pm) -> list[Problem]:
    """The ``[problems] heldout`` problems, only those named in ``heldout_names`` when it names any."""
    heldout = [p for spec in config.problems.heldout for p in load_problems(spec, pm=pm)]
    if config.problems.heldout_names:
        heldout = [p for p in heldout if p.name in config.problems.heldout_names]
    return heldout


def validation_problems(coldstart: list[Problem], count: int) -> list[Problem]:
    """``[heldout] validation``: ``count`` of the cold start's problems drawn with a fixed seed (the same in every
    run of a config, whatever its seed), in (level, name) order."""
    if not count:
        return []
    if count >= len(coldstart):
        raise KzError(
            f"[heldout] validation = {count} would leave no cold-start problem to train on ({len(coldstart)} there)"
        )
    return sorted(fixed_draw(coldstart, count), key=lambda p: (p.level, p.name))


def fixed_draw(problems: list[Problem], count: int) -> list[Problem]:
    """``count`` of ``problems`` (all of them when there are fewer) drawn with a fixed seed from their (level,
    name) order: the same in every run of a config, whatever its seed."""
    ordered = sorted(problems, key=lambda p: (p.level, p.name))
    return random.Random(0).sample(ordered, min(count, len(ordered)))


def training_problems(config: TrainConfig, coldstart: list[Problem], heldout: list[Problem], pm) -> list[Problem]:
    """What ``[heldout] decontaminate`` compares with the held-out problems before the run: the cold start's
    problems ``coldstart``, the ``[problems] tasks`` problems (unless "coldstart": those are cold-start problems)
    and, with ``[distill] variants``, every variant distillation may choose from, and with ``[distill] chains``
    the chains it draws; with ``exclude_heldout`` none of the held-out ones; each once. The Proposer's modules are judged when the Coder's tasks are drawn
    from the pool (`RunProblems.coder_tasks`)."""
    held = {(p.level, p.name) for p in heldout} if config.problems.exclude_heldout else set()
    problems = list(coldstart)
    if config.problems.tasks != COLDSTART_TASKS:
        problems += [p for p in load_problems(config.problems.tasks, pm=pm) if (p.level, p.name) not in held]
    if config.distill.variants:
        kind, _, arg = config.distill.teacher.partition(":")
        variants = allowed_variants(
            coldstart, list(config.plugins.languages), arg if kind == "solutions" else None,
            [p.name for p in heldout], pm=pm,
        )  # fmt: skip
        problems += [v.problem for v in variants]
    if config.distill.chains:
        chains = allowed_chains(
            config.plugins.languages, config.distill.chains, config.distill.variant_seed, [p.name for p in heldout],
            pm=pm,
        )  # fmt: skip
        problems += [v.problem for v in chains]
    return list({label(p): p for p in problems}.values())


def proposer_task_metrics(sources: dict[str, int], tally: dict[str, tuple[int, int]]) -> dict:
    """How much of a Coder phase the Proposer's modules made up, and how the Coder did on them.

    ``sources``: the phase's prompt counts by source (`RunProblems.coder_tasks`: newest, older, builtin);
    ``tally``: the phase's verdicts per task, key "level/name", value (passed, k) (the pass rates it files).
    ``proposer_task_share``: (newest + older) / all prompts; ``proposer_task_pass_rate``: the mean of the
    pass rates measured in the phase of the distinct pool tasks (names ``proposed_…``) it drew. Each is None
    when there is nothing to divide (no prompts; no pool task measured), never 0, which would read as a
    measurement."""
    total = sum(sources.values())
    pooled = sources.get("newest", 0) + sources.get("older", 0)
    rates = [passed / k for task, (passed, k) in tally.items() if task.split("/", 1)[-1].startswith("proposed_") and k]
    return {
        "proposer_task_share": pooled / total if total else None,
        "proposer_task_pass_rate": sum(rates) / len(rates) if rates else None,
    }


def round_share(count: int, share: float) -> int:
    return int(round(count * share))


@attrs.define
class RunProblems:
    """The problems of the run ``context`` describes. ``held``: the (level, name) keys never trained on (the
    held-out ones, with ``exclude_heldout``); ``near``: those left out as near-duplicates of a held-out problem
    (``[heldout] decontaminate = "drop-train"``); ``decontam``: the report, unless the mode is "off";
    ``validation``: the ``[heldout] validation`` problems, kept out of training like the held-out ones."""

    context: RunContext
    heldout: list[Problem]
    coldstart: list[Problem]
    held: set[tuple[int, str]] = attrs.Factory(set)
    near: set[tuple[int, str]] = attrs.Factory(set)
    decontam: Report | None = None
    validation: list[Problem] = attrs.Factory(list)
    _tasks: list[Problem] | None = attrs.field(default=None, init=False)
    _pool_near: dict[str, bool] = attrs.field(factory=dict, init=False)  # pool module -> near a held-out one
    _scored: list[Problem] | None = attrs.field(default=None, init=False)

    @classmethod
    def select(cls, context: RunContext) -> RunProblems:
        """The held-out and cold-start problems ``context.config`` names, the held-out ones (and, with
        "drop-train", their near-duplicates) left out of the cold start."""
        config, pm = context.config, context.pm
        heldout = heldout_problems(config, pm)
        held = {(p.level, p.name) for p in heldout} if config.problems.exclude_heldout else set()
        coldstart = [p for p in load_problems(config.problems.coldstart, pm=pm) if (p.level, p.name) not in held]
        validation = validation_problems(coldstart, config.heldout.validation)
        kept_out = {(p.level, p.name) for p in validation}
        coldstart = [p for p in coldstart if (p.level, p.name) not in kept_out]
        problems = cls(context, heldout, coldstart, held, validation=validation)
        if config.heldout.decontaminate != "off" and heldout:
            problems.decontam = decontaminate(problems.training_problems(), heldout)
            if config.heldout.decontaminate == "drop-train":
                problems.near = {(p.level, p.name) for p in problems.decontam.near_train}
                problems.coldstart = [p for p in coldstart if (p.level, p.name) not in problems.near]
        return problems

    def scored_heldout(self) -> list[Problem]:
        """The held-out problems a checkpoint is scored on: those the evaluator's problem check does not flag (a
        problem whose trivial output passes its own check, or whose reference is random or non-finite, cannot
        tell a kernel from no kernel; `kz eval` leaves such problems out of its scores too, here they are not
        even sampled). Checked once per run through the run's executor (and the on-disk check cache) before
        the first held-out sampling; the kept and flagged problems, and those the check reached no verdict on
        (kept, and logged), go into RUN/heldout-problems.json, which a resumed run reads back so that every
        phase is scored on the same set. All of them when ``[eval] problem_check`` is off."""
        if self._scored is not None:
            return self._scored
        path = self.context.run_dir / HELDOUT_CHECK
        names = sorted(label(p) for p in self.heldout)
        config = self.context.config.eval
        record = json.loads(path.read_text()) if path.exists() else None
        if not record or record.get("problems") != names or record.get("problem_check") != config.problem_check:
            from kzcore.evaluate.runner import flagged_problems

            verdicts = flagged_problems(self.heldout, config, self.context.executor)
            flagged, unchecked = (
                {label(p): reasons[(p.level, p.name)] for p in self.heldout if (p.level, p.name) in reasons}
                for reasons in (verdicts.flagged, verdicts.unchecked)
            )
            record = {
                "problem_check": config.problem_check,
                "problems": names,
                "flagged": flagged,
                "unchecked": unchecked,
            }
            write_text_atomic(path, json.dumps(record, indent=1))
            if flagged:
                self.context.log(
                    f"held-out: {len(flagged)} of {len(names)} problems fail the problem check and are left out "
                    f"({', '.join(sorted(flagged)[:6])}{', …' if len(flagged) > 6 else ''}; reasons in {path})"
                )
            if unchecked:
                self.context.log(
                    f"held-out: the problem check reached no verdict on {len(unchecked)} of {len(names)} problems; "
                    f"they are kept and scored unvouched for ({', '.join(sorted(unchecked)[:6])}"
                    f"{', …' if len(unchecked) > 6 else ''}; reasons in {path})"
                )
        self._scored = [p for p in self.heldout if label(p) not in record["flagged"]]
        return self._scored

    @property
    def kept_out(self) -> set[tuple[int, str]]:
        """The (level, name) keys never trained on: held-out, their near-duplicates (drop-train), validation."""
        return self.held | self.near | {(p.level, p.name) for p in self.validation}

    @property
    def never_distilled(self) -> list[str]:
        """The problem names whose distillation variants are left out too (held-out and validation ones)."""
        return [p.name for p in self.heldout] + [p.name for p in self.validation]

    def training_problems(self) -> list[Problem]:
        """What ``[heldout] decontaminate`` compares with the held-out problems (`training_problems`)."""
        return training_problems(self.context.config, self.coldstart, self.heldout, self.context.pm)

    # -- the problems the Coder trains on -------------------------------------------------------
    @property
    def tasks(self) -> list[Problem]:
        """The ``[problems] tasks`` problems, held-out ones excluded. ``"coldstart"``: the problems the cold
        start holds a verified solution to in the trainer's language (built-in and variant problems; known to
        be solvable, so GRPO groups on them can have reward variance), read once the distill phase has run;
        with ``task_max_solution_chars``, only those whose shortest verified solution is at most that long."""
        if self._tasks is None:
            spec = self.context.config.problems.tasks
            problems = self._coldstart_tasks() if spec == COLDSTART_TASKS else load_problems(spec, pm=self.context.pm)
            self._tasks = [p for p in problems if (p.level, p.name) not in self.kept_out]
        return self._tasks

    @tasks.setter
    def tasks(self, problems: list[Problem]) -> None:
        self._tasks = list(problems)

    def _coldstart_tasks(self) -> list[Problem]:
        path = self.context.distill_dir / PROBLEMS_FILE
        if not path.exists():
            raise KzError(f'[problems] tasks = "coldstart" needs the distill phase\'s {path} (is cold_start on?)')
        language, limit = self.context.language, self.context.config.problems.task_max_solution_chars
        verified = {
            (r["level"], r["name"])
            for r in read_jsonl(path)
            if language in r.get("languages", ())
            and (not limit or r.get("solution_chars", {}).get(language, 0) <= limit)
        }
        if not verified:
            raise KzError(f"no cold-start problem verified in {language} with a solution of <= {limit} characters")
        return [p for p in load_problems(str(path), pm=self.context.pm) if (p.level, p.name) in verified]

    def coldstart_problems(self) -> list[Problem]:
        """The cold start's problems, held-out ones excluded: the distill phase's verified ones (built-in and
        variants) once it has run, ``[problems] coldstart`` before."""
        verified = self.context.distill_dir / PROBLEMS_FILE
        problems = load_problems(str(verified), pm=self.context.pm) if verified.exists() else self.coldstart
        return [p for p in problems if (p.level, p.name) not in self.kept_out]

    def proposer_cold_start_problems(self) -> list[Problem]:
        """The modules the Proposer's cold start shows it: the cold start's problems, and ``[proposer]
        cold_start_modules`` (`kz compose`'s verified modules) when set; ``"compose"``: the composer's modules
        made for this run (`composed_modules`)."""
        spec = self.context.config.proposer.cold_start_modules
        if spec == COMPOSE:
            spec = str(self.composed_modules())
        return self.coldstart_problems() + (load_problems(spec, pm=self.context.pm) if spec else [])

    def composed_modules(self) -> Path:
        """RUN/composed.jsonl: the composer's verified modules over the whole catalog (kzcore.proposer.composer,
        as `kz compose` makes them, seed 0), decontaminated against this run's held-out problems by the rule
        the held-out scores use, with the coverage table (API -> modules) beside it in RUN/composed.coverage.json;
        made once, read back on resume."""
        path = self.context.run_dir / COMPOSED
        if path.exists():
            return path
        from kzcore.proposer.catalog import load_catalog
        from kzcore.proposer.composer import compose

        catalog = load_catalog()
        result = compose(catalog, heldout=self.heldout)
        if not result.modules:
            raise KzError('[proposer] cold_start_modules = "compose": the composer verified no module')
        table = {"heldout": sorted(label(p) for p in self.heldout), "seed": 0, **result.coverage_table(catalog)}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path.with_name(path.stem + ".coverage.json"), json.dumps(table, indent=1) + "\n")
        result.write(path)
        self.context.log(
            f"Proposer cold start: {table['modules']} composed modules covering {table['covered']} of "
            f"{table['catalog_apis']} catalog APIs ({result.decontaminated or 0} near a held-out problem left out) "
            f"-> {path}"
        )
        return path

    def probe_problems(self) -> list[Problem]:
        """``[heldout] probe`` training problems scored beside the held-out ones: drawn from the ``[problems]
        tasks`` with a fixed seed, so every run of a config (every seed, full or frozen) scores the same ones and
        a training-side curve does not mix learning with the rounds' task draws."""
        count = self.context.config.heldout.probe
        if not count:
            return []
        return fixed_draw(self.tasks, count)

    # -- the task pool --------------------------------------------------------------------------
    @property
    def pool_path(self) -> Path:
        return self.context.run_dir / TASK_POOL

    def accepted_pool(self) -> list:
        """The task pool's accepted modules (kzcore.proposer.pool's TaskRecord), in filing order."""
        from kzcore.proposer.pool import read_pool

        return [r for r in read_pool(self.pool_path) if r.accepted] if self.pool_path.exists() else []

    def pool_near_heldout(self, records) -> set[str]:
        """The names of the task pool records among ``records`` whose module near-duplicates a held-out
        problem (kzcore.decontam's rule; each module judged once); empty unless ``[heldout] decontaminate``."""
        if self.decontam is None:
            return set()
        todo = [r for r in records if r.name not in self._pool_near]
        if todo:
            near = {p.name for p in decontaminate([r.to_problem() for r in todo], self.heldout).near_train}
            self._pool_near.update({r.name: r.name in near for r in todo})
        return {r.name for r in records if self._pool_near[r.name]}

    def coder_tasks(self, count: int, round: int, seed: int | None = None) -> tuple[list[Problem], dict[str, int]]:
        """``count`` Coder prompts for round ``round`` and how many came from each source.

        The method's Coder trains on the Proposer's newest accepted batch; ``[task_mix]`` gives shares to
        earlier rounds' accepted pool tasks (``older``) and to the ``[problems] tasks`` problems (``builtin``).
        The newest batch is cycled through (each task once before any repeats); the other sources are drawn
        weighted toward the frontier, weight ``[task_mix] edge_weight`` (0.1) + frontier_reward(latest measured pass
        rate; unmeasured 0.5).
        A source with no task gives its share to the newest batch, then older, then built-in tasks. With
        ``[heldout] decontaminate = "drop-train"``, pool modules that near-duplicate a held-out problem are not
        drawn."""
        config = self.context.config
        rng = random.Random(config.run.seed + round if seed is None else seed)
        accepted = self.accepted_pool()
        if config.heldout.decontaminate == "drop-train":
            near = self.pool_near_heldout(accepted)
            accepted = [r for r in accepted if r.name not in near]
        newest = [r for r in accepted if r.provenance.get("round") == round]
        older = [r for r in accepted if r.provenance.get("round") != round]
        rates = self.task_rates()
        sources = {
            "newest": [(r.to_problem(), r.latest_pass_rate) for r in newest],
            "older": [(r.to_problem(), r.latest_pass_rate) for r in older],
            "builtin": [(p, rates.get(f"{p.level}/{p.name}")) for p in self.tasks],
        }
        mix = config.task_mix
        want = {"older": round_share(count, mix.older), "builtin": round_share(count, mix.builtin)}
        want["newest"] = count - want["older"] - want["builtin"]
        for name in ("older", "builtin", "newest"):  # hand an empty source's share on
            if want[name] and not sources[name]:
                heir = next((h for h in ("newest", "older", "builtin") if sources[h]), None)
                if heir is None:
                    raise KzError("no Coder tasks: [problems] tasks is empty and the pool holds no accepted module")
                want[heir] += want.pop(name)
                want[name] = 0
        chosen: list[Problem] = []
        if want["newest"]:
            batch = [p for p, _ in sources["newest"]]
            rng.shuffle(batch)
            chosen += [batch[i % len(batch)] for i in range(want["newest"])]
        for name in ("older", "builtin"):
            if want[name]:
                items = sources[name]
                weights = [mix.edge_weight + frontier_reward(0.5 if p is None else p) for _, p in items]
                chosen += [items[i][0] for i in rng.choices(range(len(items)), weights=weights, k=want[name])]
        return chosen, {k: v for k, v in want.items() if v}

    # -- measured pass rates --------------------------------------------------------------------
    def task_rates(self) -> dict[str, float]:
        """Each trained-on task's latest measured pass rate (key "level/name") from RUN/task_rates.jsonl."""
        return {task: passed / k for task, (_, passed, k) in self.task_results().items()}

    def task_results(self) -> dict[str, tuple[int, int, int]]:
        """Each trained-on task's latest measured (round, passed, k) (key "level/name") from RUN/task_rates.jsonl."""
        path = self.context.run_dir / TASK_RATES
        if not path.exists():
            return {}
        latest: dict[str, tuple[int, int, int]] = {}
        for row in read_jsonl(path):
            if row["task"] not in latest or row["round"] >= latest[row["task"]][0]:
                latest[row["task"]] = (row["round"], row["passed"], row["k"])
        return latest

    def append_task_rates(self, round: int, tally: dict) -> None:
        """Each task's (passed, k) in ``tally`` (key "level/name") as its round-``round`` pass rate, into
        RUN/task_rates.jsonl."""
        rows = ({"round": round, "task": task, "passed": passed, "k": k} for task, (passed, k) in tally.items())
        append_jsonl(self.context.run_dir / TASK_RATES, rows)

    def record_pass_rates(self, phase: Phase, tally: dict[str, list[int]]) -> int:
        """The Coder phase's verdicts per task (``tally``: "level/name" -> [passed, k], from the phase's
        pass_rates.json; no extra sampling) as the tasks' round-``phase.round`` pass rates: into the task pool
        for the Proposer's tasks, and into RUN/task_rates.jsonl for all. Returns how many tasks it filed."""
        from kzcore.proposer.pool import record_pass_rates

        if not tally:
            return 0
        self.append_task_rates(phase.round, tally)
        prefix = "proposed_"
        pooled = {
            task.split("/", 1)[1][len(prefix) :]: (passed, k)
            for task, (passed, k) in tally.items()
            if task.split("/", 1)[1].startswith(prefix)
        }
        if pooled and self.pool_path.exists():
            record_pass_rates(self.pool_path, phase.round, pooled)
        return len(tally)

    # -- decontamination ------------------------------------------------------------------------
    def write_decontamination(self) -> Path | None:
        """RUN/decontamination.json: the mode, the report (counts, the rule's constants, every near-duplicate
        pair, each clean problem's nearest training problem) and the training problems left out."""
        if self.decontam is None:
            return None
        path = self.context.run_dir / DECONTAMINATION
        dropped = sorted(label(p) for p in self.decontam.near_train) if self.near else []
        row = {"mode": self.context.config.heldout.decontaminate, **self.decontam.to_json(), "dropped_train": dropped}
        path.write_text(json.dumps(row, indent=1))
        return path
