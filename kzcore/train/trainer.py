"""The alternating trainer (`kz train`): cold-start distillation and SFT, then rounds of Proposer GRPO
(frontier reward) and Coder GRPO (CA-GRPO), with a held-out evaluation and plots after every Coder phase.

Each phase trains from the latest checkpoint and saves its own under ``RUN/phases/<id>/model``; the
schedule records finished phases, so a killed run resumes at the first unfinished one, and inside it at the
newest step its trainer saved (kzcore.train.trl_run). After each Coder
phase the pass rates it measured on its tasks go back into the task pool (the Proposer's frontier and API-set
weighting read them) and into ``RUN/task_rates.jsonl``."""

from __future__ import annotations

import functools
import json
import random
import shutil
import time
from pathlib import Path

import attrs

from kzcore.decontam import decontaminate, label
from kzcore.errors import KzError
from kzcore.executors import open_executor
from kzcore.jsonl import append_jsonl, read_jsonl
from kzcore.plugins import get_plugin_manager
from kzcore.policy import load_policy, parse_policy_spec
from kzcore.problems import load_problems
from kzcore.prompts import build_prompt
from kzcore.rewards import frontier_reward
from kzcore.train.coder import run_coder_phase
from kzcore.train.config import COLDSTART_TASKS, TrainConfig
from kzcore.train.curves import plot_curves
from kzcore.train.distill import PROBLEMS_FILE, allowed_variants, distill
from kzcore.train.schedule import phase_id, read_state, run_schedule
from kzcore.train.scoring import calibrate_tasks, score_problems
from kzcore.train.sft import run_sft
from kzcore.types import Phase, Problem

TASK_RATES = "task_rates.jsonl"
DECONTAMINATION = "decontamination.json"  # RUN/decontamination.json: [heldout] decontaminate's report
PROPOSER_COLD_START = "proposer"  # the SFT phase's Proposer model, beside its Coder model


def resolve_checkpoint(spec: str, pm=None) -> str:
    """A trainable checkpoint directory for a model spec: a directory as is (also as ``hf:DIR``), else the
    ``checkpoint`` a policy built from the spec exposes (``smollm2`` converts its GGUF once and returns the
    directory)."""
    if Path(spec).is_dir():
        return str(Path(spec))
    name, arg = parse_policy_spec(spec)
    if name == "hf" and arg and (Path(arg) / "config.json").is_file():
        return str(Path(arg))
    policy = load_policy(spec, pm=pm)
    try:
        path = getattr(policy, "checkpoint", None)
    finally:
        policy.close()
    if not path or not Path(path).is_dir():
        raise KzError(f"model {spec!r}: not a directory, and its policy exposes no trainable checkpoint")
    return str(path)


def _load_all(specs, pm) -> list[Problem]:
    return [p for spec in specs for p in load_problems(spec, pm=pm)]


def heldout_problems(config: TrainConfig, pm) -> list[Problem]:
    """The ``[problems] heldout`` problems, only those named in ``heldout_names`` when it names any."""
    heldout = _load_all(config.problems.heldout, pm)
    if config.problems.heldout_names:
        heldout = [p for p in heldout if p.name in config.problems.heldout_names]
    return heldout


def training_problems(config: TrainConfig, coldstart: list[Problem], heldout: list[Problem], pm) -> list[Problem]:
    """What ``[heldout] decontaminate`` compares with the held-out problems before the run: the cold start's
    problems ``coldstart``, the ``[problems] tasks`` problems (unless "coldstart": those are cold-start problems)
    and, with ``[distill] variants``, every variant distillation may choose from; with ``exclude_heldout``
    none of the held-out ones; each once. The Proposer's modules are judged when the Coder's tasks are drawn
    from the pool (`Trainer.coder_tasks`)."""
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
    return list({label(p): p for p in problems}.values())


class Trainer:
    def __init__(self, config: TrainConfig, pm=None, log=print):
        self.config = config
        self.pm = pm or get_plugin_manager()
        self.log = log
        self.run_dir = Path(config.run.dir)
        self.language = config.plugins.languages[0]
        self._pool = None
        heldout = heldout_problems(config, self.pm)
        self.heldout = heldout
        held = {(p.level, p.name) for p in heldout} if config.problems.exclude_heldout else set()
        self.coldstart = [
            p for p in load_problems(config.problems.coldstart, pm=self.pm) if (p.level, p.name) not in held
        ]
        self._held = held
        self._tasks: list[Problem] | None = None
        # [heldout] decontaminate: the report of the training problems against the held-out ones
        # (kzcore.decontam), and with "drop-train" the training problems left out as near-duplicates
        self.decontam = None
        self._near: set[tuple[int, str]] = set()
        self._pool_near: dict[str, bool] = {}  # pool module name -> near-duplicates a held-out problem
        if config.heldout.decontaminate != "off" and heldout:
            self.decontam = decontaminate(self.training_problems(), heldout)
            if config.heldout.decontaminate == "drop-train":
                self._near = {(p.level, p.name) for p in self.decontam.near_train}
                self.coldstart = [p for p in self.coldstart if (p.level, p.name) not in self._near]
        self.base = resolve_checkpoint(config.models.coder, self.pm)
        if config.proposer.cold_start_steps and config.models.proposer == "same":
            raise KzError(
                "[proposer] cold_start_steps trains the Proposer's own model: set [models] proposer (e.g. to the "
                'coder\'s spec) instead of "same", or cold_start_steps = 0'
            )
        same = config.models.proposer in ("same", config.models.coder)  # one spec: resolve (load) it once
        self.proposer_base = self.base if same else resolve_checkpoint(config.models.proposer, self.pm)

    @property
    def tasks(self) -> list[Problem]:
        """The ``[problems] tasks`` problems, held-out ones excluded. ``"coldstart"``: the problems the cold
        start holds a verified solution to in the trainer's language (built-in and variant problems; known to
        be solvable, so GRPO groups on them can have reward variance), read once the distill phase has run;
        with ``task_max_solution_chars``, only those whose shortest verified solution is at most that long."""
        if self._tasks is None:
            spec = self.config.problems.tasks
            if spec == COLDSTART_TASKS:
                problems = self._coldstart_tasks()
            else:
                problems = load_problems(spec, pm=self.pm)
            self._tasks = [p for p in problems if (p.level, p.name) not in self._held | self._near]
        return self._tasks

    @tasks.setter
    def tasks(self, problems: list[Problem]) -> None:
        self._tasks = list(problems)

    def _coldstart_tasks(self) -> list[Problem]:
        path = self.distill_dir / PROBLEMS_FILE
        if not path.exists():
            raise KzError(f'[problems] tasks = "coldstart" needs the distill phase\'s {path} (is cold_start on?)')
        limit = self.config.problems.task_max_solution_chars
        verified = {
            (r["level"], r["name"])
            for r in read_jsonl(path)
            if self.language in r.get("languages", ())
            and (not limit or r.get("solution_chars", {}).get(self.language, 0) <= limit)
        }
        if not verified:
            raise KzError(f"no cold-start problem verified in {self.language} with a solution of <= {limit} characters")
        return [p for p in load_problems(str(path), pm=self.pm) if (p.level, p.name) in verified]

    def training_problems(self) -> list[Problem]:
        """What ``[heldout] decontaminate`` compares with the held-out problems (`training_problems`)."""
        return training_problems(self.config, self.coldstart, self.heldout, self.pm)

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

    def write_decontamination(self) -> Path | None:
        """RUN/decontamination.json: the mode, the report (counts, the rule's constants, every near-duplicate
        pair, each clean problem's nearest training problem) and the training problems left out."""
        if self.decontam is None:
            return None
        path = self.run_dir / DECONTAMINATION
        dropped = sorted(label(p) for p in self.decontam.near_train) if self._near else []
        row = {"mode": self.config.heldout.decontaminate, **self.decontam.to_json(), "dropped_train": dropped}
        path.write_text(json.dumps(row, indent=1))
        return path

    @property
    def distill_dir(self) -> Path:
        """The cold start's distill phase directory (its SFT set, its verified problems)."""
        return self.run_dir / "phases" / phase_id(Phase("distill", 0, 0))

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def pool(self):
        """The run's one executor (``[plugins] executor``), started on first use and closed when the run
        ends: the Coder's rewards, the Proposer's gates and pass rates, distillation and held-out evaluation
        all go through it."""
        if self._pool is None:
            self._pool = open_executor(
                self.config.plugins.executor, workers=self.config.plugins.workers, config=self.config.eval, pm=self.pm
            )
        return self._pool

    def coder_prompt(self, problem: Problem, language: str | None = None) -> list[dict[str, str]]:
        """The Coder's prompt for ``problem``: the one function behind SFT data, RL, the Proposer's pass-rate
        sampling and held-out evaluation (``[prompts] coder_template``)."""
        template = self.config.prompts.coder_template
        return build_prompt(problem, language or self.language, template, pm=self.pm)

    def latest_checkpoint(self, role: str) -> str:
        """The newest saved model for ``role`` ("coder" or "proposer"); with one model in two roles, the
        newest of any phase. Falls back to the base checkpoint."""
        shared = self.config.models.proposer == "same"
        roles = {"sft", "coder", "proposer"} if shared else ({"sft", "coder"} if role == "coder" else {"proposer"})
        for pid in reversed(read_state(self.run_dir)["done"]):
            model = self.run_dir / "phases" / pid / "model"
            if pid.split("-", 1)[1] in roles and (model / "config.json").exists():
                return str(model)
            cold_start = self.run_dir / "phases" / pid / PROPOSER_COLD_START
            if role == "proposer" and not shared and (cold_start / "config.json").exists():
                return str(cold_start)
        return self.base if role == "coder" or shared else self.proposer_base

    def policy_for(self, checkpoint: str | Path):
        """A policy sampling ``checkpoint`` through the configured generation backend; ``[plugins]
        generation = "hf?batch_size=64"`` passes the options after ``?`` on (``hf:CHECKPOINT?batch_size=64``)."""
        backend, _, options = self.config.plugins.generation.partition("?")
        return load_policy(f"{backend}:{checkpoint}" + (f"?{options}" if options else ""), pm=self.pm)

    def pool_path(self) -> Path:
        return self.run_dir / "pool.jsonl"

    # -- phases -----------------------------------------------------------------------------------
    def distill(self, phase: Phase, phase_dir: Path) -> dict:
        cfg = self.config.distill
        kind, _, arg = cfg.teacher.partition(":")
        teacher = None if kind == "solutions" else load_policy(cfg.teacher, pm=self.pm)
        try:
            eval_config = attrs.evolve(self.config.eval, size=cfg.eval_size) if cfg.eval_size else self.config.eval
            summary = distill(
                self.coldstart, list(self.config.plugins.languages), phase_dir, eval_config, teacher=teacher,
                solutions=arg if kind == "solutions" else None, k=cfg.k, only_faster=cfg.only_faster,
                template=self.config.prompts.coder_template, executor=self.pool,
                variants=cfg.variants, variant_seed=cfg.variant_seed, exclude=[p.name for p in self.heldout],
                keep_reasoning=cfg.keep_reasoning, max_new_tokens=cfg.max_new_tokens, pm=self.pm,
                drop_variants={name for _, name in self._near},
            )  # fmt: skip
        finally:
            if teacher is not None:
                teacher.close()
        counts = {"candidates": summary.candidates, "correct": summary.correct, "kept": summary.kept}
        return {**counts, "variants": summary.variants} if summary.variants else counts

    def sft(self, phase: Phase, phase_dir: Path) -> dict:
        """SFT on the distilled set; the held-out score of the base model (before) and of the result."""
        data = self.distill_dir / "sft.jsonl"
        base = {}
        if self.config.heldout.base:
            base = {f"base_{k}": v for k, v in self.evaluate_heldout(Phase("base", 0, 0), Path(self.base)).items()}
        metrics = run_sft(
            self.base, data, phase_dir / "model", self.config.sft, log=self.log, quiet=self.config.run.quiet
        )
        if self.config.proposer.cold_start_steps:
            metrics.update(self.proposer_cold_start(phase_dir))
        return {**base, **metrics, **self.evaluate_heldout(phase, phase_dir / "model")}

    def coldstart_problems(self) -> list[Problem]:
        """The cold start's problems, held-out ones excluded: the distill phase's verified ones (built-in and
        variants) once it has run, ``[problems] coldstart`` before."""
        verified = self.distill_dir / PROBLEMS_FILE
        problems = load_problems(str(verified), pm=self.pm) if verified.exists() else self.coldstart
        return [p for p in problems if (p.level, p.name) not in self._held | self._near]

    def proposer_cold_start_problems(self) -> list[Problem]:
        """The modules the Proposer's cold start shows it: the cold start's problems, and ``[proposer]
        cold_start_modules`` (`kz compose`'s verified modules) when set."""
        spec = self.config.proposer.cold_start_modules
        return self.coldstart_problems() + (load_problems(spec, pm=self.pm) if spec else [])

    def proposer_cold_start(self, phase_dir: Path) -> dict:
        """The Proposer's cold start (``[proposer] cold_start_steps``): SFT of the Proposer's base on the cold
        start's problem modules, each the answer to the Proposer prompt for its own API set; the model goes to
        ``PHASE/proposer`` (the Proposer phases start from it). Metrics are prefixed ``proposer_sft_``."""
        from kzcore.proposer.catalog import load_catalog
        from kzcore.proposer.prompt import cold_start_rows, load_examples

        problems = self.proposer_cold_start_problems()
        catalog = load_catalog()
        rows, counts = cold_start_rows(problems, catalog, load_examples(catalog, pm=self.pm), seed=self.config.run.seed)
        if not rows:
            raise KzError(
                f"[proposer] cold_start_steps: none of {len(problems)} cold-start problems makes a Proposer row {counts}"
            )
        data = phase_dir / "proposer-sft.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        settings = attrs.evolve(self.config.sft, max_steps=self.config.proposer.cold_start_steps)
        self.log(
            f"proposer cold start: {counts['rows']} rows from {len(problems)} problems, {settings.max_steps} SFT steps"
        )
        metrics = run_sft(
            self.proposer_base, data, phase_dir / PROPOSER_COLD_START, settings, log=self.log,
            quiet=self.config.run.quiet, label="proposer cold start",
        )  # fmt: skip
        return {f"proposer_sft_{k}": v for k, v in {**metrics, **counts}.items()}

    def coder(self, phase: Phase, phase_dir: Path) -> dict:
        settings = attrs.evolve(self.config.coder, max_steps=phase.steps)
        per_step = max(1, settings.batch_size // settings.num_generations)
        calibration = {}
        if self.config.task_mix.calibrate and not self.task_rates():
            # the first round's draw toward the frontier: the Coder's pass rates before it (round 0)
            rates, calibration = calibrate_tasks(self, phase_dir / "calibration")
            rows = [{"round": 0, "task": task, "passed": n, "k": k} for task, (n, k) in rates.items()]
            append_jsonl(self.run_dir / TASK_RATES, rows)
        tasks, sources = self.coder_tasks(phase.steps * per_step, phase.round)
        self.log(f"phase {phase_id(phase)}: {len(tasks)} prompts ({', '.join(f'{v} {k}' for k, v in sources.items())})")
        metrics = run_coder_phase(
            self.latest_checkpoint("coder"), tasks, self.language, phase_dir / "model", settings, self.pool,
            self.config.eval, self.config.ca_grpo, prompt_for=self.coder_prompt, pm=self.pm, log=self.log,
            quiet=self.config.run.quiet,
        )  # fmt: skip
        metrics["task_sources"] = sources
        if self.decontam is not None:  # accepted pool modules near a held-out problem (left out with drop-train)
            metrics["pool_near_heldout"] = len(self.pool_near_heldout(self._accepted_pool()))
        metrics.update(calibration)
        metrics["tasks_measured"] = self.record_pass_rates(phase, phase_dir / "model" / "pass_rates.json")
        metrics.update(self.evaluate_heldout(phase, phase_dir / "model"))
        return metrics

    def proposer(self, phase: Phase, phase_dir: Path) -> dict:
        from kzcore.train.proposer_phase import run_proposer_phase

        return run_proposer_phase(self, phase, phase_dir)

    # -- tasks and their pass rates ---------------------------------------------------------------
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
        rng = random.Random(self.config.run.seed + round if seed is None else seed)
        accepted = self._accepted_pool()
        if self.config.heldout.decontaminate == "drop-train":
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
        mix = self.config.task_mix
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

    def _accepted_pool(self) -> list:
        from kzcore.proposer.pool import read_pool

        return [r for r in read_pool(self.pool_path()) if r.accepted] if self.pool_path().exists() else []

    def task_rates(self) -> dict[str, float]:
        """Each trained-on task's latest measured pass rate (key "level/name") from RUN/task_rates.jsonl."""
        return {task: passed / k for task, (_, passed, k) in self.task_results().items()}

    def task_results(self) -> dict[str, tuple[int, int, int]]:
        """Each trained-on task's latest measured (round, passed, k) (key "level/name") from RUN/task_rates.jsonl."""
        path = self.run_dir / TASK_RATES
        if not path.exists():
            return {}
        latest: dict[str, tuple[int, int, int]] = {}
        for row in read_jsonl(path):
            if row["task"] not in latest or row["round"] >= latest[row["task"]][0]:
                latest[row["task"]] = (row["round"], row["passed"], row["k"])
        return latest

    def record_pass_rates(self, phase: Phase, tally_path: Path) -> int:
        """The Coder phase's verdicts per task (no extra sampling) as the tasks' round-``phase.round`` pass
        rates: into the task pool for the Proposer's tasks, and into RUN/task_rates.jsonl for all."""
        from kzcore.proposer.pool import record_pass_rates

        tally = json.loads(tally_path.read_text()) if tally_path.exists() else {}
        if not tally:
            return 0
        rows = ({"round": phase.round, "task": task, "passed": passed, "k": k} for task, (passed, k) in tally.items())
        append_jsonl(self.run_dir / TASK_RATES, rows)
        prefix = "proposed_"
        pooled = {
            task.split("/", 1)[1][len(prefix) :]: (passed, k)
            for task, (passed, k) in tally.items()
            if task.split("/", 1)[1].startswith(prefix)
        }
        if pooled and self.pool_path().exists():
            record_pass_rates(self.pool_path(), phase.round, pooled)
        return len(tally)

    # -- held-out evaluation ----------------------------------------------------------------------
    def probe_problems(self) -> list[Problem]:
        """``[heldout] probe`` training problems scored beside the held-out ones: drawn from the ``[problems]
        tasks`` with a fixed seed, so every run of a config (every seed, full or frozen) scores the same ones and
        a training-side curve does not mix learning with the rounds' task draws."""
        count = self.config.heldout.probe
        if not count:
            return []
        tasks = sorted(self.tasks, key=lambda p: (p.level, p.name))
        return random.Random(0).sample(tasks, min(count, len(tasks)))

    def evaluate_heldout(self, phase: Phase, checkpoint: Path) -> dict:
        """pass@k / fast_1 of the checkpoint on the held-out problems, for every configured language, per
        level and overall, with the verdict mix; appended to RUN/heldout.jsonl and plotted to RUN/curves.png.
        pass@k is reported for each configured k <= n. ``heldout_pass@k`` (no language) is the first
        language's overall figure. With ``[heldout] probe``, the same for that many fixed training problems in
        the first language, keys ``probe_...``. With ``[heldout] decontaminate``, the same samples scored on the
        clean held-out problems alone too (``heldout_{language}_clean_pass@k``; ``heldout_clean_pass@k`` for the
        first language)."""
        if not self.heldout:
            return {}
        cfg = self.config.heldout
        out = self.run_dir / "heldout" / phase_id(phase)
        languages = list(self.config.plugins.languages)
        metrics: dict = {}
        clean = self.decontam.clean if self.decontam is not None else None
        policy = self.policy_for(checkpoint)
        try:
            for language in languages:
                scored = score_problems(
                    self, policy, self.heldout, language, out, f"held-out {phase_id(phase)}", "heldout", clean=clean
                )
                metrics.update(scored)
                if language == languages[0]:
                    for k in (k for k in cfg.k if k <= cfg.n):
                        metrics[f"heldout_pass@{k}"] = scored[f"heldout_{language}_pass@{k}"]
                        metrics[f"heldout_fast_1@{k}"] = scored[f"heldout_{language}_fast_1@{k}"]
                        if clean is not None:
                            metrics[f"heldout_clean_pass@{k}"] = scored[f"heldout_{language}_clean_pass@{k}"]
            probe = self.probe_problems()
            if probe:
                where = f"training probe {phase_id(phase)}"
                metrics.update(score_problems(self, policy, probe, languages[0], out, where, "probe"))
        finally:
            policy.close()
        row = {"phase": phase_id(phase), "round": phase.round, "time": time.time(), **metrics}
        append_jsonl(self.run_dir / "heldout.jsonl", [row])
        plot_curves(self.run_dir)
        return metrics

    # -- checkpoints ------------------------------------------------------------------------------
    def best_phase(self) -> str | None:
        """The finished phase whose model scored the best held-out pass@1 (the earliest of ties)."""
        path = self.run_dir / "heldout.jsonl"
        if not path.exists():
            return None
        rows = read_jsonl(path)
        scored = [(r.get("heldout_pass@1"), i, r["phase"]) for i, r in enumerate(rows) if r["phase"] != "00-base"]
        scored = [(s, -i, pid) for s, i, pid in scored if s is not None]
        return max(scored)[2] if scored else None

    def prune_checkpoints(self) -> list[str]:
        """With ``[run] keep_checkpoints = "last-best"``, delete the models of finished phases that no later
        phase starts from and that are not the best by held-out pass@1; returns the deleted phase ids."""
        if self.config.run.keep_checkpoints == "all":
            return []
        keep = {self.latest_checkpoint("coder"), self.latest_checkpoint("proposer")}
        best = self.best_phase()
        if best:
            keep.add(str(self.run_dir / "phases" / best / "model"))
        deleted = []
        for pid in read_state(self.run_dir)["done"]:
            for name in ("model", PROPOSER_COLD_START):
                model = self.run_dir / "phases" / pid / name
                if (model / "config.json").exists() and str(model) not in keep:
                    for item in model.iterdir():  # logs beside the weights stay
                        if item.suffix in (".safetensors", ".bin", ".pt") or item.name.startswith("checkpoint-"):
                            shutil.rmtree(item) if item.is_dir() else item.unlink()
                    (model / "config.json").rename(model / "config.json.pruned")
                    deleted.append(pid if name == "model" else f"{pid}/{name}")
        return deleted

    # -- driver -----------------------------------------------------------------------------------
    def run(self, until: str | None = None) -> dict:
        """Run (or resume) the schedule; with ``until`` (a phase id), stop after that phase."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        written = self.write_decontamination()
        if written:
            c = self.decontam.counts()
            self.log(
                f"decontamination ({self.config.heldout.decontaminate}): {c['contaminated']} of {c['heldout']} "
                f"held-out problems near-duplicate a training problem, {c['clean']} clean"
                + (f"; {c['near_duplicate_train']} training problems left out" if self._near else "")
                + f" ({written})"
            )
        if self.config.run.quiet:
            from kzcore.train.trl_run import quiet_libraries

            quiet_libraries()
        handlers = {"distill": self.distill, "sft": self.sft, "coder": self.coder, "proposer": self.proposer}
        handlers = {role: self._pruning_first(h) for role, h in handlers.items()}
        try:
            state = run_schedule(self.config.schedule, handlers, self.run_dir, pm=self.pm, log=self.log, until=until)
        finally:
            if self._pool is not None:
                self._pool.close()
        self.prune_checkpoints()
        plot_curves(self.run_dir)
        best = self.best_phase()
        if best:
            self.log(f"best held-out pass@1: phase {best} ({self.run_dir / 'phases' / best / 'model'})")
        return state

    def _pruning_first(self, handler):
        @functools.wraps(handler)
        def run_phase(phase: Phase, phase_dir: Path) -> dict:
            pruned = self.prune_checkpoints()
            if pruned:
                self.log(f"checkpoints pruned (keep_checkpoints = last-best): {', '.join(pruned)}")
            return handler(phase, phase_dir)

        return run_phase


def round_share(count: int, share: float) -> int:
    return int(round(count * share))
