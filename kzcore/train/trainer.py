"""The alternating trainer (`kz train`): cold-start distillation and SFT, then rounds of Proposer GRPO
(frontier reward) and Coder GRPO (CA-GRPO, or with ``[coder] method`` a control at the same compute without RL:
kzcore.train.controls), with a held-out evaluation and plots after every Coder phase.

Each phase trains from the latest checkpoint and saves its own under ``RUN/phases/<id>/model``; the
schedule records finished phases, so a killed run resumes at the first unfinished one, and inside it at the
newest step its trainer saved (kzcore.train.trl_run). After each Coder
phase the pass rates it measured on its tasks go back into the task pool (the Proposer's frontier and API-set
weighting read them) and into ``RUN/task_rates.jsonl``.

This module drives the phases; what they share (config, plugins, log, the one executor) is
kzcore.train.context's RunContext, which problems each phase gets is kzcore.train.tasks, and which model each
starts from (and pruning the others) is kzcore.train.checkpoints."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.jsonl import append_jsonl
from kzcore.plugins import get_plugin_manager
from kzcore.policy import load_policy
from kzcore.train.checkpoints import HELDOUT_LOG, PROPOSER_COLD_START, Checkpoints, best_phase
from kzcore.train.coder import run_coder_phase
from kzcore.train.config import TrainConfig
from kzcore.train.context import RunContext
from kzcore.train.controls import first_draw, rft_control, sft_control
from kzcore.train.curves import plot_curves
from kzcore.train.distill import distill
from kzcore.train.schedule import phase_id, run_schedule
from kzcore.train.scoring import calibrate_tasks, score_problems
from kzcore.train.sft import run_sft
from kzcore.train.tasks import HELDOUT_CHECK, RunProblems, proposer_task_metrics
from kzcore.types import Phase


class Trainer:
    """One training run of ``config``: `run` goes through the schedule, calling a method per phase role
    (`distill`, `sft`, `proposer`, `coder`), each of which returns the phase's metrics."""

    def __init__(self, config: TrainConfig, pm=None, log=print):
        self.config = config
        self.pm = pm or get_plugin_manager()
        self.log = log
        if config.run.quiet:  # before the base checkpoints resolve: converting and loading them draws bars too
            from kzcore.train.trl_run import quiet_libraries

            quiet_libraries()
        self.context = RunContext(config, self.pm, log)
        self.problems = RunProblems.select(self.context)
        self.checkpoints = Checkpoints.for_config(config, self.pm)

    # -- phases -----------------------------------------------------------------------------------
    def distill(self, phase: Phase, phase_dir: Path) -> dict:
        """The cold start's SFT set: the teacher's (or a suite's) verified answers to the cold-start problems."""
        cfg = self.config.distill
        kind, _, arg = cfg.teacher.partition(":")
        teacher = None if kind == "solutions" else load_policy(cfg.teacher, pm=self.pm)
        try:
            eval_config = attrs.evolve(self.config.eval, size=cfg.eval_size) if cfg.eval_size else self.config.eval
            summary = distill(
                self.problems.coldstart, list(self.config.plugins.languages), phase_dir, eval_config, teacher=teacher,
                solutions=arg if kind == "solutions" else None, k=cfg.k, only_faster=cfg.only_faster,
                template=self.config.prompts.coder_template, executor=self.context.executor,
                variants=cfg.variants, variant_seed=cfg.variant_seed, exclude=self.problems.never_distilled,
                keep_reasoning=cfg.keep_reasoning, max_new_tokens=cfg.max_new_tokens, pm=self.pm,
                drop_variants={name for _, name in self.problems.near}, chains=cfg.chains,
            )  # fmt: skip
        finally:
            if teacher is not None:
                teacher.close()
        counts = {"candidates": summary.candidates, "correct": summary.correct, "kept": summary.kept}
        return {**counts, "variants": summary.variants} if summary.variants else counts

    def sft(self, phase: Phase, phase_dir: Path) -> dict:
        """SFT on the distilled set; the held-out score of the base model (before) and of the result."""
        data = self.context.distill_dir / "sft.jsonl"
        base_model = self.checkpoints.base
        base = {}
        if self.config.heldout.base:
            base = {f"base_{k}": v for k, v in self.evaluate_heldout(Phase("base", 0, 0), Path(base_model)).items()}
        metrics = run_sft(
            base_model, data, phase_dir / "model", self.config.sft, log=self.log, quiet=self.config.run.quiet
        )
        if self.config.proposer.cold_start_steps:
            metrics.update(self.proposer_cold_start(phase_dir))
        return {**base, **metrics, **self.evaluate_heldout(phase, phase_dir / "model")}

    def proposer_cold_start(self, phase_dir: Path) -> dict:
        """The Proposer's cold start (``[proposer] cold_start_steps``): SFT of the Proposer's base on the cold
        start's problem modules, each the answer to the Proposer prompt for its own API set; the model goes to
        ``PHASE/proposer`` (the Proposer phases start from it). Metrics are prefixed ``proposer_sft_``."""
        from kzcore.proposer.catalog import load_catalog
        from kzcore.proposer.prompt import cold_start_rows, load_examples

        problems = self.problems.proposer_cold_start_problems()
        catalog = load_catalog()
        rows, counts = cold_start_rows(
            problems, catalog, load_examples(catalog, pm=self.pm), seed=self.config.run.seed,
            per_api=self.config.proposer.examples == "per-api",
        )  # fmt: skip
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
            self.checkpoints.proposer_base, data, phase_dir / PROPOSER_COLD_START, settings, log=self.log,
            quiet=self.config.run.quiet, label="proposer cold start",
        )  # fmt: skip
        return {f"proposer_sft_{k}": v for k, v in {**metrics, **counts}.items()}

    def coder(self, phase: Phase, phase_dir: Path) -> dict:
        """The Coder phase by ``[coder] method``: GRPO of the Coder on the round's draw of tasks
        (`RunProblems.coder_tasks`; before the first draw, with ``[task_mix] calibrate``, the tasks' pass rates
        measured), or one of the controls at the same compute without RL (kzcore.train.controls: "rft" on the
        same draw, "sft" on the cold start's distilled set); the pass rates measured on the tasks filed, and the
        result scored on the held-out problems. Metrics record the method."""
        settings = attrs.evolve(self.config.coder, max_steps=phase.steps)
        start = self.checkpoints.latest("coder")
        if settings.method == "sft":
            metrics = sft_control(self.context, start, phase, phase_dir)
        else:
            metrics = self.coder_on_tasks(phase, phase_dir, settings, start)
        metrics = {"method": settings.method, **metrics}
        metrics.update(self.evaluate_heldout(phase, phase_dir / "model"))
        return metrics

    def coder_on_tasks(self, phase: Phase, phase_dir: Path, settings, start: str) -> dict:
        """The Coder phase's methods that sample the round's tasks: CA-GRPO, or the "rft" control on the same
        draw (the same count, sources and seed); each task's verdicts over the phase become its pass rate."""
        per_step = max(1, settings.batch_size // settings.num_generations)
        calibration = {}
        if self.config.task_mix.calibrate and not self.problems.task_rates():
            # the first round's draw toward the frontier: the Coder's pass rates before it (round 0)
            out = phase_dir / "calibration"
            rates, calibration = calibrate_tasks(self.context, start, self.problems.tasks, out)
            self.problems.append_task_rates(0, rates)
        tasks, sources = self.problems.coder_tasks(phase.steps * per_step, phase.round)
        if settings.method == "rft":  # its pass rates, filed at the end, weight the draw: a rerun keeps the first
            tasks, sources = first_draw(phase_dir, tasks, sources)
        self.log(f"phase {phase_id(phase)}: {len(tasks)} prompts ({', '.join(f'{v} {k}' for k, v in sources.items())})")
        if settings.method == "rft":
            metrics, tally = rft_control(self.context, start, tasks, phase, phase_dir)
            (phase_dir / "model" / "pass_rates.json").write_text(json.dumps(tally, indent=1))
        else:
            metrics = run_coder_phase(
                start, tasks, self.context.language, phase_dir / "model", settings.grpo(), self.context.executor,
                self.config.eval, self.config.ca_grpo, prompt_for=self.context.coder_prompt, pm=self.pm,
                log=self.log, quiet=self.config.run.quiet,
            )  # fmt: skip
        metrics["task_sources"] = sources
        if self.problems.decontam is not None:  # accepted pool modules near a held-out one (drop-train: not drawn)
            metrics["pool_near_heldout"] = len(self.problems.pool_near_heldout(self.problems.accepted_pool()))
        metrics.update(calibration)
        tally_path = phase_dir / "model" / "pass_rates.json"
        tally = json.loads(tally_path.read_text()) if tally_path.exists() else {}
        metrics["tasks_measured"] = self.problems.record_pass_rates(phase, tally)
        metrics.update(proposer_task_metrics(sources, tally))
        return metrics

    def proposer(self, phase: Phase, phase_dir: Path) -> dict:
        """GRPO of the Proposer against the current Coder (kzcore.train.proposer_phase)."""
        from kzcore.train.proposer_phase import run_proposer_phase

        return run_proposer_phase(
            self.context, self.problems, phase, phase_dir, coder_checkpoint=self.checkpoints.latest("coder"),
            proposer_checkpoint=self.checkpoints.latest("proposer"),
        )  # fmt: skip

    # -- held-out evaluation ----------------------------------------------------------------------
    def evaluate_heldout(self, phase: Phase, checkpoint: Path) -> dict:
        """pass@k / fast_1 of the checkpoint on the held-out problems (those the problem check keeps:
        `RunProblems.scored_heldout`), for every configured language, per level and overall, with the verdict
        mix and the evaluation's cost; appended to RUN/heldout.jsonl and plotted to RUN/curves.png. pass@k is
        reported for each configured k <= n. ``heldout_pass@k`` (no language) is the first language's overall
        figure. With ``[heldout] decontaminate``, the same samples scored on the clean held-out problems alone
        too (``heldout_{language}_clean_pass@k``; ``heldout_clean_pass@k`` for the first language). With
        ``[heldout] phases = "ends"`` the held-out problems are scored only for the base model, after SFT and
        after the last Coder phase; with ``"last"``, not after SFT either. At every evaluation, in the first
        language: ``[heldout] validation`` problems (keys ``validation_...``) and ``[heldout] probe`` training
        problems (keys ``probe_...``)."""
        full = self.problems.heldout and self.scores_heldout(phase)
        extra = [(name, problems) for name, problems in self.side_sets() if problems]
        if not full and not extra:
            return {}
        run_dir = self.context.run_dir
        out = run_dir / "heldout" / phase_id(phase)
        languages = list(self.config.plugins.languages)
        metrics: dict = {}
        policy = self.context.policy_for(checkpoint)
        try:
            if full:
                metrics.update(self.score_heldout(policy, phase, out, languages))
            for name, problems in extra:
                where = f"{name} {phase_id(phase)}"
                metrics.update(score_problems(self.context, policy, problems, languages[0], out, where, name))
        finally:
            policy.close()
        row = {"phase": phase_id(phase), "round": phase.round, "time": time.time(), **metrics}
        append_jsonl(run_dir / HELDOUT_LOG, [row])
        plot_curves(run_dir)
        return metrics

    def scores_heldout(self, phase: Phase) -> bool:
        """Whether ``phase`` scores the held-out problems (``[heldout] phases``)."""
        mode = self.config.heldout.phases
        if mode == "every" or phase.role == "base" or (phase.role == "sft" and mode == "ends"):
            return True
        coders = [p for p in self.config.schedule.phases() if p.role == "coder"]
        return bool(coders) and phase_id(phase) == phase_id(coders[-1])

    def side_sets(self) -> list[tuple[str, list]]:
        """The problem sets scored at every held-out evaluation beside the held-out ones: validation, probe."""
        return [("validation", self.problems.validation), ("probe", self.problems.probe_problems())]

    def score_heldout(self, policy, phase: Phase, out: Path, languages: list[str]) -> dict:
        cfg, run_dir = self.config.heldout, self.context.run_dir
        heldout = self.problems.scored_heldout()
        metrics: dict = {"heldout_problems": len(heldout), "heldout_flagged": len(self.problems.heldout) - len(heldout)}
        if not heldout:
            self.log(f"held-out: every problem fails the problem check, nothing scored (see {run_dir / HELDOUT_CHECK})")
            return metrics
        decontam = self.problems.decontam
        kept = {(p.level, p.name) for p in heldout}
        clean = [p for p in decontam.clean if (p.level, p.name) in kept] if decontam is not None else None
        for language in languages:
            where = f"held-out {phase_id(phase)}"
            scored = score_problems(self.context, policy, heldout, language, out, where, "heldout", clean=clean)
            metrics.update(scored)
            if language == languages[0]:
                for k in cfg.ks():
                    metrics[f"heldout_pass@{k}"] = scored[f"heldout_{language}_pass@{k}"]
                    metrics[f"heldout_fast_1@{k}"] = scored[f"heldout_{language}_fast_1@{k}"]
                    if clean is not None:
                        metrics[f"heldout_clean_pass@{k}"] = scored[f"heldout_{language}_clean_pass@{k}"]
        return metrics

    # -- driver -----------------------------------------------------------------------------------
    def run(self, until: str | None = None) -> dict:
        """Run (or resume) the schedule; with ``until`` (a phase id), stop after that phase."""
        run_dir = self.context.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self._write_decontamination()
        handlers = {"distill": self.distill, "sft": self.sft, "coder": self.coder, "proposer": self.proposer}
        handlers = {role: self._pruning_first(h) for role, h in handlers.items()}
        try:
            state = run_schedule(self.config.schedule, handlers, run_dir, pm=self.pm, log=self.log, until=until)
        finally:
            self.context.close()
        self.checkpoints.prune()
        plot_curves(run_dir)
        best = best_phase(run_dir)
        if best:
            self.log(f"best held-out pass@1: phase {best} ({self.checkpoints.phase_model(best)})")
        return state

    def _write_decontamination(self) -> None:
        written = self.problems.write_decontamination()
        if written:
            c = self.problems.decontam.counts()
            self.log(
                f"decontamination ({self.config.heldout.decontaminate}): {c['contaminated']} of {c['heldout']} "
                f"held-out problems near-duplicate a training problem, {c['clean']} clean"
                + (f"; {c['near_duplicate_train']} training problems left out" if self.problems.near else "")
                + f" ({written})"
            )

    def _pruning_first(self, handler):
        @functools.wraps(handler)
        def run_phase(phase: Phase, phase_dir: Path) -> dict:
            pruned = self.checkpoints.prune()
            if pruned:
                self.log(f"checkpoints pruned (keep_checkpoints = last-best): {', '.join(pruned)}")
            return handler(phase, phase_dir)

        return run_phase
