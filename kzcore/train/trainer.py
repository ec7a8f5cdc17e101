"""The alternating trainer (`kz train`): cold-start distillation and SFT, then rounds of Proposer GRPO
(frontier reward) and Coder GRPO (CA-GRPO), with a held-out evaluation and plots after every round.

Each phase trains from the latest checkpoint and saves its own under ``RUN/phases/<id>/model``; the
schedule records finished phases, so a killed run resumes at the first unfinished one."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.plugins import executors, get_plugin_manager, plugin_specs
from kzcore.policy import SamplingParams, load_policy
from kzcore.problems import load_problems
from kzcore.rewards import frontier_reward
from kzcore.train.coder import run_coder_phase
from kzcore.train.config import TrainConfig
from kzcore.train.distill import distill
from kzcore.train.schedule import phase_id, read_state, run_schedule
from kzcore.train.sft import run_sft
from kzcore.types import Phase, Problem


def resolve_checkpoint(spec: str, pm=None) -> str:
    """A trainable checkpoint directory for a model spec: a directory as is, else the ``checkpoint`` a
    policy built from the spec exposes (``smollm2`` converts its GGUF once and returns the directory)."""
    if Path(spec).is_dir():
        return str(Path(spec))
    policy = load_policy(spec, pm=pm)
    try:
        path = getattr(policy, "checkpoint", None)
    finally:
        policy.close()
    if not path or not Path(path).is_dir():
        raise KzError(f"model {spec!r}: not a directory, and its policy exposes no trainable checkpoint")
    return str(path)


class Trainer:
    def __init__(self, config: TrainConfig, pm=None, log=print):
        self.config = config
        self.pm = pm or get_plugin_manager()
        self.log = log
        self.run_dir = Path(config.run.dir)
        self.language = config.plugins.languages[0]
        self._pool = None
        heldout = load_problems(config.problems.heldout, pm=self.pm) if config.problems.heldout else []
        if config.problems.heldout_names:
            heldout = [p for p in heldout if p.name in config.problems.heldout_names]
        self.heldout = heldout
        held = {(p.level, p.name) for p in heldout} if config.problems.exclude_heldout else set()
        self.coldstart = [
            p for p in load_problems(config.problems.coldstart, pm=self.pm) if (p.level, p.name) not in held
        ]
        self.tasks = [p for p in load_problems(config.problems.tasks, pm=self.pm) if (p.level, p.name) not in held]
        self.base = resolve_checkpoint(config.models.coder, self.pm)
        self.proposer_base = (
            self.base if config.models.proposer == "same" else resolve_checkpoint(config.models.proposer, self.pm)
        )

    # -- plumbing ---------------------------------------------------------------------------------
    @property
    def pool(self):
        if self._pool is None:
            factory = executors(self.pm).get(self.config.plugins.executor)
            self._pool = factory(
                workers=self.config.plugins.workers, config=self.config.eval, plugins=plugin_specs(self.pm)
            )
            if hasattr(self._pool, "start"):
                self._pool.start()
        return self._pool

    def latest_checkpoint(self, role: str) -> str:
        """The newest saved model for ``role`` ("coder" or "proposer"); with one model in two roles, the
        newest of any phase. Falls back to the base checkpoint."""
        shared = self.config.models.proposer == "same"
        roles = {"sft", "coder", "proposer"} if shared else ({"sft", "coder"} if role == "coder" else {"proposer"})
        for pid in reversed(read_state(self.run_dir)["done"]):
            model = self.run_dir / "phases" / pid / "model"
            if pid.split("-", 1)[1] in roles and (model / "config.json").exists():
                return str(model)
        return self.base if role == "coder" or shared else self.proposer_base

    def policy_for(self, checkpoint: str | Path):
        """A policy sampling ``checkpoint`` through the configured generation backend."""
        return load_policy(f"{self.config.plugins.generation}:{checkpoint}", pm=self.pm)

    def pool_path(self) -> Path:
        return self.run_dir / "pool.jsonl"

    # -- phases -----------------------------------------------------------------------------------
    def distill(self, phase: Phase, phase_dir: Path) -> dict:
        cfg = self.config.distill
        kind, _, arg = cfg.teacher.partition(":")
        teacher = None if kind == "solutions" else load_policy(cfg.teacher, pm=self.pm)
        try:
            summary = distill(
                self.coldstart, list(self.config.plugins.languages), phase_dir, self.config.eval, teacher=teacher,
                solutions=arg if kind == "solutions" else None, k=cfg.k, only_faster=cfg.only_faster,
                template=cfg.template, workers=self.config.plugins.workers,
                variants=cfg.variants, variant_seed=cfg.variant_seed, exclude=[p.name for p in self.heldout],
                keep_reasoning=cfg.keep_reasoning, max_new_tokens=cfg.max_new_tokens, pm=self.pm,
            )  # fmt: skip
        finally:
            if teacher is not None:
                teacher.close()
        counts = {"candidates": summary.candidates, "correct": summary.correct, "kept": summary.kept}
        return {**counts, "variants": summary.variants} if summary.variants else counts

    def sft(self, phase: Phase, phase_dir: Path) -> dict:
        """SFT on the distilled set; the held-out score of the base model (before) and of the result."""
        data = self.run_dir / "phases" / phase_id(Phase("distill", 0, 0)) / "sft.jsonl"
        base = {f"base_{k}": v for k, v in self.evaluate_heldout(Phase("base", 0, 0), Path(self.base)).items()}
        metrics = run_sft(self.base, data, phase_dir / "model", self.config.sft)
        return {**base, **metrics, **self.evaluate_heldout(phase, phase_dir / "model")}

    def coder(self, phase: Phase, phase_dir: Path) -> dict:
        settings = attrs.evolve(self.config.coder, max_steps=phase.steps)
        per_step = max(1, settings.batch_size // settings.num_generations)
        tasks = self.frontier_tasks(phase.steps * per_step, seed=self.config.run.seed + phase.round)
        metrics = run_coder_phase(
            self.latest_checkpoint("coder"), tasks, self.language, phase_dir / "model", settings, self.pool,
            self.config.eval, self.config.ca_grpo, pm=self.pm,
        )  # fmt: skip
        metrics.update(self.evaluate_heldout(phase, phase_dir / "model"))
        return metrics

    def proposer(self, phase: Phase, phase_dir: Path) -> dict:
        from kzcore.train.proposer_phase import run_proposer_phase

        return run_proposer_phase(self, phase, phase_dir)

    # -- tasks and evaluation ---------------------------------------------------------------------
    def frontier_tasks(self, count: int, seed: int) -> list[Problem]:
        """``count`` Coder tasks drawn from the initial tasks and the accepted pool, weighted toward the
        frontier: weight = 0.1 + frontier_reward(latest pass rate), unmeasured tasks counting as p = 0.5."""
        from kzcore.proposer.pool import read_pool

        candidates = [(p, None) for p in self.tasks]
        if self.pool_path().exists():
            candidates += [(r.to_problem(), r.latest_pass_rate) for r in read_pool(self.pool_path()) if r.accepted]
        if not candidates:
            raise KzError("no Coder tasks: the task problems are empty and the pool holds no accepted module")
        weights = [0.1 + frontier_reward(0.5 if p is None else p) for _, p in candidates]
        rng = random.Random(seed)
        return [candidates[i][0] for i in rng.choices(range(len(candidates)), weights=weights, k=count)]

    def evaluate_heldout(self, phase: Phase, checkpoint: Path) -> dict:
        """pass@k / fast_p of the checkpoint on the held-out problems; appended to RUN/heldout.jsonl and
        plotted to RUN/heldout.png."""
        if not self.heldout:
            return {}
        from kzcore.evaluate.runner import evaluate
        from kzcore.metrics import summarize
        from kzcore.sampling import sample_candidates

        cfg = self.config.heldout
        out = self.run_dir / "heldout" / phase_id(phase)
        policy = self.policy_for(checkpoint)
        try:
            params = SamplingParams(
                n=cfg.n, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=self.config.run.seed
            )
            candidates = sample_candidates(
                policy, self.heldout, self.language, params, out / "completions.jsonl", pm=self.pm
            )
        finally:
            policy.close()
        results = evaluate(
            self.heldout,
            candidates,
            self.config.eval,
            out / "results.jsonl",
            workers=self.config.plugins.workers,
            pm=self.pm,
        )
        metrics = {}
        for k in cfg.k:
            row = summarize(results, k=k, problems=[(p.level, p.name) for p in self.heldout])["all"]
            metrics[f"heldout_pass@{k}"] = row["pass@k"]
            metrics[f"heldout_fast_1@{k}"] = row["fast_1"]  # None when nothing was timed (CPU)
        with (self.run_dir / "heldout.jsonl").open("a") as f:
            f.write(json.dumps({"phase": phase_id(phase), "round": phase.round, "time": time.time(), **metrics}) + "\n")
        plot_curves(self.run_dir)
        return metrics

    # -- driver -----------------------------------------------------------------------------------
    def run(self) -> dict:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        handlers = {"distill": self.distill, "sft": self.sft, "coder": self.coder, "proposer": self.proposer}
        try:
            state = run_schedule(self.config.schedule, handlers, self.run_dir, pm=self.pm, log=self.log)
        finally:
            if self._pool is not None:
                self._pool.close()
        plot_curves(self.run_dir)
        return state


def plot_curves(run_dir: Path) -> Path | None:
    """PNG of per-phase reward / correctness and held-out pass@k over the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    state = read_state(run_dir)
    metrics = state.get("metrics", {})
    if not metrics:
        return None
    heldout = (
        [json.loads(x) for x in (run_dir / "heldout.jsonl").read_text().splitlines()]
        if (run_dir / "heldout.jsonl").exists()
        else []
    )
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for role, marker in (("coder", "o"), ("proposer", "s")):
        pts = [(i, m.get("reward_mean")) for i, (pid, m) in enumerate(metrics.items()) if pid.endswith(role)]
        if pts:
            axes[0].plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=f"{role} reward")
    axes[0].set_xlabel("phase")
    axes[0].set_title("training reward")
    axes[0].legend()
    for key in sorted({k for h in heldout for k in h if k.startswith("heldout_pass@")}):
        axes[1].plot(range(len(heldout)), [h.get(key) for h in heldout], marker="o", label=key)
    axes[1].set_xticks(range(len(heldout)), [h["phase"] for h in heldout], rotation=30)
    axes[1].set_xlabel("after phase")
    axes[1].set_title("held-out pass@k")
    if heldout:
        axes[1].legend()
    fig.tight_layout()
    path = run_dir / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
