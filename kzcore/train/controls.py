"""The Coder phase's controls at the same compute, without RL (``[coder] method``): ``"sft"`` continues SFT on the
cold start's distilled set; ``"rft"`` (rejection-sampling fine-tuning) samples the tasks a CA-GRPO phase would
draw from the current Coder, as many samples per task as a GRPO group, keeps those the evaluator files correct
and fine-tunes on them. Either trains the Coder phase's ``max_steps`` optimizer steps of its ``batch_size``
sequences per process, so a run that differs from a CA-GRPO run only in ``method`` spends the same updates
without a reward (docs/training.md).

Neighbours: kzcore.train.trainer's Coder phase calls `sft_control` / `rft_control` (the task draw, the pass
rates and the held-out scoring stay there); kzcore.train.scoring samples and evaluates; kzcore.train.sft trains."""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kzcore.errors import KzError
from kzcore.jsonl import write_text_atomic
from kzcore.policy import SamplingParams
from kzcore.sampling import read_completions
from kzcore.train.context import RunContext
from kzcore.train.schedule import phase_id
from kzcore.train.scoring import sample_and_evaluate
from kzcore.train.sft import SFTSettings, load_sft_rows, run_sft
from kzcore.train.trl_run import IDENTITY, identity_of, rows_sha
from kzcore.types import Phase, Problem

if TYPE_CHECKING:
    from kzcore.train.config import CoderSection

TRAIN_ROWS = "sft-rows.jsonl"  # PHASE/sft-rows.jsonl: a control's training rows, one per sequence it trains on
TRAINED = "control.json"  # PHASE/control.json: a finished control's training identity and metrics
RFT_DIR = "rft"  # PHASE/rft: the drawn tasks, the samples, their verdicts and the kept rows
DRAW = "draw.json"  # PHASE/rft/draw.json: the phase's task draw, made once


def processes() -> int:
    """The launch's training processes: ``WORLD_SIZE`` under accelerate or torchrun, else 1."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def control_settings(sft: SFTSettings, coder: CoderSection, steps: int) -> SFTSettings:
    """What a control's SFT trains with: ``steps`` optimizer steps of the Coder's ``batch_size`` sequences per
    process, in micro-batches of the largest divisor of it up to ``[sft] batch_size`` (the memory SFT was set
    for; gradient accumulation makes up the rest); the Coder's seed, device and save and log cadence (the phase
    is the Coder's); ``[sft]``'s learning rate and max_length (it is SFT)."""
    micro = max(d for d in range(1, min(sft.batch_size, coder.batch_size) + 1) if coder.batch_size % d == 0)
    return attrs.evolve(
        sft, max_steps=steps, batch_size=micro, grad_accum=coder.batch_size // micro, seed=coder.seed,
        use_cpu=coder.use_cpu, report_to=coder.report_to, logging_steps=coder.logging_steps,
        save_steps=coder.save_steps, save_minutes=coder.save_minutes,
    )  # fmt: skip


def lay_out(rows: list[dict], count: int, seed: str, start: int = 0) -> list[dict]:
    """``count`` rows from position ``start`` of the endless sequence of passes over ``rows``, each pass in an
    order of its own drawn from ``seed``: one row per sequence the control's steps train on, so every step's
    batch is full (an epoch's short last batch would train fewer sequences than GRPO's step), and a later phase
    that starts where an earlier one stopped continues through the data as SFT would."""
    if not rows:
        raise ValueError("lay_out: no rows to lay out")
    out: list[dict] = []
    position = start
    while len(out) < count:
        done, offset = divmod(position, len(rows))
        order = list(range(len(rows)))
        random.Random(f"{seed}/{done}").shuffle(order)
        taken = order[offset : offset + count - len(out)]
        out += [rows[i] for i in taken]
        position += len(taken)
    return out


def train_rows(context: RunContext, model: str, rows: list[dict], settings: SFTSettings, phase_dir: Path, label: str):
    """SFT of ``model`` on ``rows`` (written to ``PHASE/sft-rows.jsonl``) into ``PHASE/model``, resuming inside
    the phase as SFT does (kzcore.train.trl_run). Once trained, ``PHASE/control.json`` keeps the training's
    identity and metrics, so a rerun of a phase killed after its training (in its held-out scoring) does not
    train again. Returns run_sft's metrics with ``sequences``: every step's full batch, over every process."""
    data = phase_dir / TRAIN_ROWS
    write_text_atomic(data, "".join(json.dumps(r) + "\n" for r in rows))
    identity = identity_of(model, settings, data=rows_sha(load_sft_rows(data)))
    trained, out = phase_dir / TRAINED, phase_dir / "model"
    if trained.exists() and (out / "config.json").exists():
        saved = json.loads(trained.read_text())
        if saved.get("identity") == identity:
            context.log(f"{label}: trained in an earlier run ({out}), reused")
            return saved["metrics"]
    metrics = run_sft(model, data, out, settings, log=context.log, quiet=context.config.run.quiet, label=label)
    per_step = settings.batch_size * settings.grad_accum * processes()
    metrics = {**metrics, "sequences": metrics["steps"] * per_step}
    write_text_atomic(trained, json.dumps({"identity": identity, "metrics": metrics}, indent=1))
    return metrics


def sft_control(context: RunContext, model: str, phase: Phase, phase_dir: Path) -> dict:
    """``method = "sft"``: SFT of the Coder at ``model`` continued on the distilled set the SFT phase trained on
    (``RUN/phases/00-distill/sft.jsonl``) for the phase's steps of the Coder's batch. Round r takes the rows
    after round r-1's, passes over the set in seeded orders: the SFT phase's training, continued. Metrics:
    run_sft's, with ``sequences`` and ``tokens``, and ``source_rows`` (the distilled set's size)."""
    data = context.distill_dir / "sft.jsonl"
    if not data.exists():
        raise KzError(
            f'[coder] method = "sft" continues SFT on the cold start\'s distilled set, and {data} does not exist '
            "(is [schedule] cold_start on?)"
        )
    coder = context.config.coder
    rows = load_sft_rows(data)
    settings = control_settings(context.config.sft, coder, phase.steps)
    count = phase.steps * coder.batch_size * processes()
    laid = lay_out(rows, count, f"sft/{coder.seed}", start=(phase.round - 1) * count)
    context.log(
        f"phase {phase_id(phase)}: SFT continued (no RL): {phase.steps} steps x {coder.batch_size} sequences on the "
        f"{len(rows)} distilled rows ({data})"
    )
    return {"source_rows": len(rows), **train_rows(context, model, laid, settings, phase_dir, "sft control")}


def rft_control(
    context: RunContext, model: str, tasks: list[Problem], phase: Phase, phase_dir: Path
) -> tuple[dict, dict]:
    """``method = "rft"``: ``num_generations`` samples of each of ``tasks`` (the CA-GRPO phase's draw; a task
    drawn m times gets m groups' worth) from the Coder at ``model``, with the Coder's sampling settings, evaluated
    by the run's evaluator; the correct ones, as prompt/completion rows (``PHASE/rft/kept.jsonl``), fine-tuned on
    for the phase's steps of the Coder's batch. With no correct sample the phase trains nothing: it says so, and
    its model is the one it started from (files linked, where the filesystem allows, else copied), so held-out
    scoring, the next phase and pruning find it where a Coder phase's is.

    Returns (metrics, each task's [correct, samples] keyed "level/name": the phase's measured pass rates).
    Metrics: ``samples``, ``correct``, ``kept``, ``correct_rate``, ``sample_seconds`` (sampling and evaluation),
    and the training's ``steps``, ``sequences``, ``tokens`` (all 0 with nothing kept)."""
    pid = phase_id(phase)
    out = phase_dir / RFT_DIR
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    samples = sample_tasks(context, model, tasks, out, f"rft {pid}")
    sample_seconds = round(time.perf_counter() - t0, 3)
    by_key = {(p.level, p.name): p for p in tasks}
    tally: dict[str, list[int]] = {}
    rows = []
    for result, completion in samples:
        counts = tally.setdefault(f"{result.level}/{result.problem}", [0, 0])
        counts[0] += result.verified
        counts[1] += 1
        if result.verified:
            rows.append(
                {
                    "prompt": context.coder_prompt(by_key[(result.level, result.problem)]),
                    "completion": [{"role": "assistant", "content": completion}],
                    "problem": result.problem,
                    "level": result.level,
                    "language": result.language,
                    "sample": result.sample,
                    "speedup": result.speedup,
                }
            )
    (out / "kept.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    coder = context.config.coder
    metrics: dict = {
        "samples": len(samples),
        "correct": len(rows),
        "kept": len(rows),  # every correct sample is a training row
        "correct_rate": len(rows) / len(samples) if samples else 0.0,
        "sample_seconds": sample_seconds,
    }
    if not rows:
        context.log(
            f"phase {pid}: rft: 0 of {len(samples)} samples correct, nothing to fine-tune on: the Coder stays "
            f"as it was ({model}, linked into {phase_dir / 'model'})"
        )
        keep_model(Path(model), phase_dir / "model")
        note = "no correct sample: nothing trained, the model is the one the phase started from"
        return {**metrics, "steps": 0, "sequences": 0, "tokens": 0, "note": note}, tally
    context.log(
        f"phase {pid}: rft (no RL): {len(rows)} of {len(samples)} samples correct, fine-tuned on for "
        f"{phase.steps} steps x {coder.batch_size} sequences"
    )
    settings = control_settings(context.config.sft, coder, phase.steps)
    count = phase.steps * coder.batch_size * processes()
    laid = lay_out(rows, count, f"rft/{coder.seed}/{phase.round}")
    return {**metrics, **train_rows(context, model, laid, settings, phase_dir, "rft control")}, tally


def first_draw(phase_dir: Path, tasks: list[Problem], sources: dict[str, int]) -> tuple[list[Problem], dict]:
    """The rft phase's task draw as it was first made (``PHASE/rft/draw.json``), else ``tasks`` and their
    ``sources``, saved there: the draw reads the tasks' pass rates, which the phase files when it ends, so a rerun
    of a phase killed after that (in its held-out scoring) would draw other tasks and sample them again."""
    path = phase_dir / RFT_DIR / DRAW
    if path.exists():
        saved = json.loads(path.read_text())
        return [Problem(**p) for p in saved["tasks"]], saved["sources"]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps({"sources": sources, "tasks": [attrs.asdict(p) for p in tasks]}, indent=1))
    return tasks, sources


def sample_tasks(context: RunContext, model: str, tasks: list[Problem], out: Path, where: str) -> list[tuple]:
    """(verdict, completion text) of ``num_generations`` samples per draw of each of ``tasks`` from the Coder
    at ``model``, through the trainer's sample-and-evaluate chain (kzcore.train.scoring; files in ``out``,
    reused by a rerun). Tasks drawn m times are sampled m x num_generations times, in files prefixed ``x{m}-``."""
    coder, language = context.config.coder, context.language
    draws = collections.Counter((p.level, p.name) for p in tasks)
    by_key = {(p.level, p.name): p for p in tasks}
    samples = []
    policy = context.policy_for(model)
    try:
        for m in sorted(set(draws.values())):
            group = [by_key[key] for key, n in draws.items() if n == m]
            params = SamplingParams(
                n=m * coder.num_generations, temperature=coder.temperature, top_p=coder.top_p,
                max_new_tokens=coder.max_completion_length, seed=coder.seed,
            )  # fmt: skip
            files = "" if m == 1 else f"x{m}-"
            results = sample_and_evaluate(context, policy, group, language, params, out, files, where)
            texts = {
                (r["level"], r["problem"], r["sample"]): r["completion"]
                for r in read_completions(out / f"{files}completions-{language}.jsonl")
                if r.get("language") == language
            }
            samples += [(r, texts[(r.level, r.problem, r.sample)]) for r in results]
    finally:
        policy.close()
    return samples


def keep_model(src: Path, dst: Path) -> None:
    """``dst`` holds the model at ``src`` as it is: each of its files hard-linked (so pruning either copy
    leaves the other whole), or copied where linking fails; a Coder phase's logs in ``src`` are left behind."""
    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if not item.is_file() or item.suffix == ".jsonl" or item.name in ("pass_rates.json", IDENTITY):
            continue
        target = dst / item.name
        target.unlink(missing_ok=True)
        try:
            os.link(item, target)
        except OSError:
            shutil.copy2(item, target)
