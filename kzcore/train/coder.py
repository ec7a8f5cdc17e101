"""The Coder phase: GRPO (TRL's GRPOTrainer) on kernel tasks, with CA-GRPO rewards computed from the
evaluator's verdicts. The reward function evaluates each process's completions through an executor,
gathers the verdicts of every process and pays per complete group (kzcore.train.ca_grpo)."""

from __future__ import annotations

import collections
import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from kzcore.errors import KzError
from kzcore.evaluate.runner import map_prepared
from kzcore.jsonl import read_jsonl, write_text_atomic
from kzcore.plugins import get_plugin_manager
from kzcore.prompts import build_prompt
from kzcore.train.ca_grpo import CAGRPOConfig, Verdict, ca_grpo_rewards, gather_verdicts
from kzcore.types import Candidate, EvalJob, Problem

# TRL's GRPOConfig.scale_rewards: what a group's advantages (reward - group mean) are divided by. "none": nothing
# (Dr. GRPO); "batch": the whole batch's reward std; "group": the group's own std, which blows a group's tiny
# spread (a speed difference, pass-rate noise) up to advantages of about +-1, as loud as correct vs wrong.
SCALE_REWARDS = ("none", "batch", "group")
SAMPLES = "samples.jsonl"  # PHASE/model/samples.jsonl: every completion of the phase with its verdict and reward


def _scale_rewards_name(value):
    """TRL's boolean spellings as the names it turns them into (true: "group", false: "none")."""
    if value is True:
        return "group"
    if value is False:
        return "none"
    return value


def _check_scale_rewards(instance, attribute, value) -> None:
    if value not in SCALE_REWARDS:
        raise ValueError(
            f"scale_rewards must be one of {', '.join(repr(v) for v in SCALE_REWARDS)} (or true / false), got {value!r}"
        )


@attrs.frozen
class GRPOSettings:
    max_steps: int = 20
    num_generations: int = 5
    batch_size: int = 5  # completions per device per step; a multiple of num_generations on one process
    max_completion_length: int = 1024
    learning_rate: float = 1e-6
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.0
    seed: int = 0
    use_cpu: bool = False
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    report_to: tuple[str, ...] = ()
    logging_steps: int = 1
    gradient_checkpointing: bool = False
    # advantages = reward - group mean, divided by nothing ("none"), the batch's std or the group's std (SCALE_REWARDS)
    scale_rewards: str = attrs.field(default="none", converter=_scale_rewards_name, validator=_check_scale_rewards)
    # the trainer's state is saved every save_steps steps and whenever save_minutes have passed since the last
    # save (0 turns either off); an interrupted phase resumes from the newest save (kzcore.train.trl_run)
    save_steps: int = 0
    save_minutes: float = 5.0


def completion_text(completion) -> str:
    """TRL hands conversational completions as message lists, plain ones as strings."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion)
    return str(completion)


class CoderReward:
    """A TRL reward function: completions → evaluator verdicts → CA-GRPO rewards. Appends one JSON line of
    statistics per call to ``log_path`` and tallies each task's verdicts over the phase (``tally``: task key →
    [correct, samples], over every process's completions) — the Coder's measured pass rate on the tasks it
    trained on, which the trainer feeds back to the Proposer. With ``samples_path``, also one line per completion
    (`sample_rows`): what the Coder wrote for each task and why it failed, the record that tells a task the
    Coder never passes from a harness fault."""

    def __init__(
        self, problems: list[Problem], language: str, pool, eval_config, ca_config: CAGRPOConfig, log_path: Path,
        samples_path: Path | None = None,
    ):  # fmt: skip
        self.__name__ = "ca_grpo"
        self.by_key = {(p.level, p.name): p for p in problems}
        self.language, self.pool, self.eval_config, self.ca_config = language, pool, eval_config, ca_config
        self.log_path, self.samples_path = log_path, samples_path
        self.calls = 0
        self._ended: float | None = None  # perf_counter() when the previous call returned
        self.tally: dict[str, list[int]] = {}

    def start_at(self, step: int) -> None:
        """Training starts at ``step`` (0, or a resumed checkpoint's): the log keeps only the rows of the steps
        before it, and the tally and the call count are those rows' (rows of steps a killed run did not keep are
        dropped; those steps run again)."""
        rows = keep_steps_before(self.log_path, step)
        if self.samples_path is not None:
            keep_steps_before(self.samples_path, step)
        self.tally, seen = {}, set()
        for row in rows:
            if row["call"] in seen:  # one row per process and call; the counts are the whole group's
                continue
            seen.add(row["call"])
            for key, (correct, samples) in row.get("task_counts", {}).items():
                counts = self.tally.setdefault(key, [0, 0])
                counts[0] += correct
                counts[1] += samples
        self.calls = max(seen) + 1 if seen else 0

    def __call__(
        self, prompts, completions, problem, level, task_id=None, trainer_state=None, log_metric=None, **kwargs
    ):
        t0 = time.perf_counter()
        if task_id is None:  # a dataset without per-prompt ids: one prompt per problem
            task_id = [f"{lvl}/{name}" for name, lvl in zip(problem, level)]
        jobs = []
        for i, (name, lvl, completion) in enumerate(zip(problem, level, completions)):
            cand = Candidate(
                problem=name, language=self.language, level=lvl, sample=i, completion=completion_text(completion)
            )
            jobs.append(EvalJob(problem=self.by_key[(lvl, name)], candidate=cand, config=self.eval_config))
        by_sample = {r.sample: r for r in map_prepared(self.pool, jobs)}
        results = [by_sample[i] for i in range(len(jobs))]
        # A group is the completions of one prompt (per-prompt id, not per problem: two prompts of one problem
        # in a batch are two groups) in this call; every process counts calls alike. Each verdict carries its
        # speedup's noise margin: speed differences within it pay nothing (kzcore.train.ca_grpo).
        verdicts = [Verdict.of(f"{self.calls}:{tid}", r) for tid, r in zip(task_id, results)]
        everything, start = gather_verdicts(verdicts)
        rewards = ca_grpo_rewards(everything, self.ca_config)[start : start + len(verdicts)]
        keys = dict(zip(task_id, (f"{r.level}/{r.problem}" for r in results)))
        task_counts = self._tally(everything, _gather_keys(keys))
        eval_s = time.perf_counter() - t0
        # since the previous call ended: this step's generation and the previous step's update (TRL's share)
        between_s = None if self._ended is None else t0 - self._ended
        self._log(results, verdicts, rewards, eval_s, between_s, trainer_state, log_metric, task_counts)
        if self.samples_path is not None:
            rows = sample_rows(self.calls, trainer_state, task_id, results, rewards, jobs)
            with self.samples_path.open("a") as f:  # one write a call: processes append whole lines
                f.write("".join(json.dumps(r) + "\n" for r in rows))
        self.calls += 1
        self._ended = time.perf_counter()
        return rewards

    def _tally(self, verdicts: list[Verdict], task_keys: dict[str, str]) -> dict[str, list[int]]:
        """Adds every process's verdicts of this call to the tally; returns this call's counts per task."""
        call: dict[str, list[int]] = {}
        for v in verdicts:
            counts = call.setdefault(task_keys[v.group.split(":", 1)[1]], [0, 0])
            counts[0] += v.correct
            counts[1] += 1
        for key, (correct, samples) in call.items():
            total = self.tally.setdefault(key, [0, 0])
            total[0] += correct
            total[1] += samples
        return call

    def _log(self, results, verdicts, rewards, eval_s, between_s, trainer_state, log_metric, task_counts) -> None:
        groups = collections.defaultdict(list)
        for v, r in zip(verdicts, rewards):
            groups[v.group].append((v.correct, r))
        speedups = [r.speedup for r in results if r.correct and r.speedup]
        row = {
            "call": self.calls,
            "step": getattr(trainer_state, "global_step", None),
            "reward_mean": statistics.fmean(rewards),
            "reward_std": statistics.pstdev(rewards),
            "correct_rate": sum(r.correct for r in results) / len(results),
            "group_correct_rates": [sum(c for c, _ in g) / len(g) for g in groups.values()],
            # groups (this process's share of each) whose rewards are all equal: no gradient from them
            "frac_groups_zero_std": sum(len({r for _, r in g}) == 1 for g in groups.values()) / len(groups),
            "statuses": dict(collections.Counter(r.status.value for r in results)),
            "speedup_geomean": statistics.geometric_mean(speedups) if speedups else None,
            "eval_seconds": round(eval_s, 3),
            "between_calls_seconds": None if between_s is None else round(between_s, 3),
            "task_counts": task_counts,  # every process's verdicts per task: the phase's pass rates, after a resume too
        }
        with self.log_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if log_metric is not None:
            log_metric("kz/correct_rate", row["correct_rate"])
            log_metric("kz/eval_seconds", row["eval_seconds"])


MESSAGE_CHARS = 600  # a sample row keeps the head of the evaluator's message: the first error is what matters


def sample_rows(call: int, trainer_state, task_ids, results, rewards, jobs) -> list[dict]:
    """One row per completion of a reward call (this process's): the task, its group, the verdict with the head
    of its message, the speedup, the reward and the completion itself."""
    step = getattr(trainer_state, "global_step", None)
    return [
        {"call": call, "step": step, "task": f"{r.level}/{r.problem}", "group": f"{call}:{tid}",
         "status": r.status.value, "message": (r.message or "")[:MESSAGE_CHARS], "speedup": r.speedup,
         "reward": reward, "completion": job.candidate.completion}
        for tid, r, reward, job in zip(task_ids, results, rewards, jobs)
    ]  # fmt: skip


def keep_steps_before(log_path: Path, step: int) -> list[dict]:
    """The rows of a reward log (one per reward call, each with the trainer's ``step``) of the steps before
    ``step``; the file is rewritten with only those (atomically) when it held more. Returns the kept rows."""
    if not log_path.exists():
        return []
    rows = read_jsonl(log_path)
    kept = [r for r in rows if r.get("step") is not None and r["step"] < step]
    if len(kept) != len(rows):
        write_text_atomic(log_path, "".join(json.dumps(r) + "\n" for r in kept))
    return kept


def _gather_keys(local: dict[str, str]) -> dict[str, str]:
    """Every process's task id → task key map, merged (task ids are dataset rows, the same on every rank)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    gathered: list[dict[str, str]] = [None] * dist.get_world_size()  # type: ignore[list-item]
    dist.all_gather_object(gathered, local)
    return {k: v for part in gathered for k, v in part.items()}


def task_dataset(problems: list[Problem], prompt_for: Callable[[Problem], list[dict]]):
    """One row per Coder prompt, in order: the chat from ``prompt_for`` (the trainer's one Coder-prompt
    function), the problem's name and level, and a per-row ``task_id`` that keys its CA-GRPO group."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {"prompt": prompt_for(p), "problem": p.name, "level": p.level, "task_id": str(i)}
            for i, p in enumerate(problems)
        ]
    )


def grpo_config(settings: GRPOSettings, output_dir: Path, quiet: bool = False):
    from trl import GRPOConfig

    from kzcore.train.precision import trainer_precision

    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=settings.max_steps,
        num_generations=settings.num_generations,
        per_device_train_batch_size=settings.batch_size,
        max_completion_length=settings.max_completion_length,
        learning_rate=settings.learning_rate,
        temperature=settings.temperature,
        top_p=settings.top_p,
        beta=settings.beta,
        seed=settings.seed,
        use_cpu=settings.use_cpu,
        use_vllm=settings.use_vllm,
        vllm_mode=settings.vllm_mode,
        report_to=list(settings.report_to) or "none",
        logging_steps=settings.logging_steps,
        save_strategy="no",  # checkpoints are asked for by trl_run's callback (every N steps or minutes)
        disable_tqdm=quiet,
        gradient_checkpointing=settings.gradient_checkpointing,
        scale_rewards=settings.scale_rewards,
        **trainer_precision(settings.use_cpu),
    )


def without_cudnn_attention(generate: Callable) -> Callable:
    """``generate`` run with scaled-dot-product attention by any of torch's backends but cuDNN's.

    cuDNN's attention (torch's choice on Hopper GPUs in bf16) builds an execution graph for each new sequence
    length; decoding grows the KV cache a position a step and every GRPO step's batch has new lengths, so each
    decoding step paid for new graphs (SmolLM2-135M on an H200, 16 completions: ~110 ms a step with cuDNN, ~35
    without). Only generation is affected: the policy update keeps torch's default backends."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [
        getattr(SDPBackend, n)
        for n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "OVERRIDEABLE")
        if hasattr(SDPBackend, n)
    ]

    @functools.wraps(generate)
    def wrapped(*args, **kwargs):
        with sdpa_kernel(backends):
            return generate(*args, **kwargs)

    return wrapped


def run_grpo(
    model: str, dataset, reward_funcs: list, settings: GRPOSettings, output_dir: Path, pm=None, log=print,
    quiet: bool = False, label: str = "grpo", callbacks: tuple = (),
) -> dict:  # fmt: skip
    """One GRPO phase on ``dataset`` with ``reward_funcs``; saves the model to ``output_dir``. Generation goes
    through a plugin's ``kz_fast_generate`` when one offers it for the model. Resumes from the newest checkpoint a
    run of the same model, dataset and settings left in ``output_dir``; a reward function with ``start_at(step)``
    is told the step training starts at first (see `CoderReward.start_at`). ``quiet``: one ``log`` line per step
    instead of the libraries' bars and metric dicts; ``callbacks``: extra TrainerCallbacks."""
    try:
        from trl import GRPOTrainer
    except ImportError as exc:
        raise KzError(f"GRPO needs trl ({exc}); pip install 'kzcore[train]'") from None
    from kzcore.train.trl_run import identity_of, quiet_libraries, rows_sha, train_phase

    if quiet:
        quiet_libraries()
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward_funcs, args=grpo_config(settings, output_dir, quiet=quiet),
        train_dataset=dataset, callbacks=list(callbacks),
    )  # fmt: skip
    # TRL generates with the unwrapped model (the same module as trainer.model): its generate is replaced there.
    generate = without_cudnn_attention(trainer.model.generate)
    pm = pm or get_plugin_manager()
    timed = TimedCalls(pm.hook.kz_fast_generate(model=trainer.model, generate=generate) or generate)
    trainer.model.generate = timed

    def start_at(step: int) -> None:
        for func in reward_funcs:
            if hasattr(func, "start_at"):
                func.start_at(step)

    identity = identity_of(model, settings, dataset=rows_sha(dataset))
    run = train_phase(trainer, Path(output_dir), settings, label, identity, log=log, quiet=quiet, on_start=start_at)
    logs = [h for h in trainer.state.log_history if "reward" in h]

    def mean(key: str) -> float:
        values = [h[key] for h in logs if h.get(key) is not None]
        return statistics.fmean(values) if values else float("nan")

    args = trainer.args
    # a step's sequences over every process: one completion each (its prompt's tokens and its own), a batch of
    # them per process; what the Coder's controls at the same compute match (kzcore.train.controls)
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    return {
        "steps": trainer.state.global_step,
        "sequences": trainer.state.global_step * per_step,
        "tokens": trainer.state.num_input_tokens_seen,
        "reward_mean": mean("reward"),
        "reward_std": mean("reward_std"),
        # TRL's share of groups whose rewards are all equal (zero advantage: no gradient from them)
        "frac_reward_zero_std": mean("frac_reward_zero_std"),
        "scale_rewards": settings.scale_rewards,  # how the advantages were scaled (docs/training.md)
        **run,  # train_seconds: this run's part of the phase (after a resume, the steps after the checkpoint)
        # inside train_seconds: every generate call, end to end; None when TRL never called it (vLLM generates)
        "generation_seconds": round(timed.seconds, 3) if timed.calls else None,
    }


class TimedCalls:
    """``fn`` with the wall time of its calls added up (generation returns token ids on the host, so a call's
    end is its work's end)."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn, self.seconds, self.calls = fn, 0.0, 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def run_coder_phase(
    model: str, problems: list[Problem], language: str, output_dir: Path, settings: GRPOSettings, pool, eval_config,
    ca_config: CAGRPOConfig = CAGRPOConfig(), prompt_for: Callable[[Problem], list[dict]] | None = None, pm=None,
    log=print, quiet: bool = False,
) -> dict:  # fmt: skip
    """GRPO the Coder at ``model`` on ``problems`` (one prompt each, in order); the checkpoint lands in
    ``output_dir``, with ``tasks.jsonl`` (the prompts trained on), ``pass_rates.json`` (each task's
    [correct, samples] over the phase) and ``samples.jsonl`` (every completion with its verdict). ``prompt_for``
    builds the Coder prompt (default: the kernelbench template)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    if prompt_for is None:
        prompt_for = functools.partial(build_prompt, language=language, template="kernelbench", pm=pm)
    reward = CoderReward(
        problems, language, pool, eval_config, ca_config, output_dir / "rewards.jsonl", output_dir / SAMPLES
    )
    dataset = task_dataset(problems, prompt_for)
    dataset.to_json(str(output_dir / "tasks.jsonl"))
    metrics = run_grpo(model, dataset, [reward], settings, output_dir, pm=pm, log=log, quiet=quiet, label="coder")
    (output_dir / "pass_rates.json").write_text(json.dumps(reward.tally, indent=1))
    rows = read_jsonl(output_dir / "rewards.jsonl")
    metrics["correct_rate"] = statistics.fmean(r["correct_rate"] for r in rows) if rows else 0.0
    metrics["frac_groups_zero_std"] = statistics.fmean(r["frac_groups_zero_std"] for r in rows) if rows else 1.0
    # the steps this run trained (after a resume, those after the checkpoint): the part train_seconds covers
    this_run = [r for r in rows if (r.get("step") or 0) >= metrics.get("resumed_at_step", 0)]
    metrics["eval_seconds"] = round(sum(r["eval_seconds"] for r in this_run), 3)
    between = [r["between_calls_seconds"] for r in this_run if r.get("between_calls_seconds") is not None]
    metrics["between_calls_seconds"] = round(sum(between), 3)  # generation + updates, after the first call
    # the rest of the phase: the optimizer steps (forward and backward of the scored completions) and TRL's own work
    if metrics.get("generation_seconds") is not None:
        rest = metrics["train_seconds"] - metrics["generation_seconds"] - metrics["eval_seconds"]
        metrics["update_seconds"] = round(rest, 3)
    return metrics
