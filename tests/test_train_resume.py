"""Training phases resume inside a phase: SFT and GRPO save the trainer's state every N steps or
minutes, keep only the newest save, resume from it when the same command runs again, and say on Ctrl-C what
was kept. The subprocess test interrupts a real `kz sft` once a checkpoint exists (polled for, never slept on)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kzcore.errors import KzError
from kzcore.train.coder import CoderReward, keep_steps_before
from kzcore.train.trl_run import (
    IDENTITY,
    InterruptNote,
    kept_steps,
    last_checkpoint,
    resume_point,
    save_cadence,
    unfinished_phase_dirs,
)
from tests.test_cli_subprocess import KZ, kz_env, sigint_default
from tests.tinymodel import build_tiny_checkpoint

DEADLINE_S = 600  # a hang guard only: the test waits for events, however slow the machine


def checkpoint(output_dir: Path, step: int, max_steps: int, torn: bool = False) -> Path:
    path = output_dir / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_text("weights")
    if not torn:  # transformers writes trainer_state.json last
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max_steps}))
    return path


def test_the_newest_complete_checkpoint_is_resumed_and_the_rest_removed(tmp_path):
    out = tmp_path / "model"
    old, newest = checkpoint(out, 2, 8), checkpoint(out, 3, 8)
    torn = checkpoint(out, 4, 8, torn=True)  # a kill in the middle of its save
    assert last_checkpoint(out) == newest
    assert resume_point(out, {"model": "m"}) == newest
    assert not old.exists() and not torn.exists() and newest.exists()
    assert json.loads((out / IDENTITY).read_text()) == {"model": "m"}


def test_checkpoints_of_a_different_run_are_an_error_and_stay(tmp_path):
    out = tmp_path / "model"
    kept = checkpoint(out, 3, 8)
    (out / IDENTITY).write_text(json.dumps({"model": "m", "data": "a"}))
    with pytest.raises(KzError, match=r"holds checkpoint-3 of a different run \(data changed\); delete .*checkpoint-3"):
        resume_point(out, {"model": "m", "data": "b"})
    assert kept.exists()


def test_the_interrupt_line_says_what_each_unfinished_phase_kept(tmp_path):
    run = tmp_path / "run"
    (run / "phases" / "00-distill").mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({"done": ["00-distill"], "metrics": {}}))
    sft = checkpoint(run / "phases" / "00-sft" / "model", 3, 8)
    checkpoint(run / "phases" / "00-sft" / "model", 4, 8, torn=True)
    resume = f"finished phases are recorded in {run}; run the same command again to resume"
    note = InterruptNote(lambda: unfinished_phase_dirs(run), resume, resume)
    assert str(note) == f"SFT kept 3 of 8 steps in {sft}; {resume}"
    coder = checkpoint(run / "phases" / "01-coder" / "model", 1, 2)
    assert str(note) == f"SFT kept 3 of 8 steps in {sft}; Coder GRPO kept 1 of 2 steps in {coder}; {resume}"
    assert kept_steps([("SFT", tmp_path / "nothing")]) == []
    assert str(InterruptNote(lambda: [], "resume", "nothing was saved")) == "nothing was saved"
    assert save_cadence(0, 5.0) == "every 5 minutes" and save_cadence(2, 0) == "every 2 steps"
    assert save_cadence(1, 0.5) == "every 1 step and every 0.5 minutes" and save_cadence(0, 0) == "only at the end"


def test_a_resumed_coder_phase_keeps_the_tally_of_the_steps_it_kept(tmp_path):
    """The reward log's rows of steps after the checkpoint are dropped (those steps run again); the pass-rate
    tally and the call count come back from the kept rows, counted once per call (one row per process)."""
    log = tmp_path / "rewards.jsonl"
    rows = [
        {"call": 0, "step": 0, "task_counts": {"1/1_ReLU": [1, 2]}},
        {"call": 0, "step": 0, "task_counts": {"1/1_ReLU": [1, 2]}},  # a second process's row of the same call
        {"call": 1, "step": 1, "task_counts": {"1/1_ReLU": [0, 2], "1/3_Sigmoid": [2, 2]}},
        {"call": 2, "step": 2, "task_counts": {"1/3_Sigmoid": [1, 2]}},  # a step the checkpoint does not hold
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = tmp_path / "samples.jsonl"  # the completions of the same calls, one row each
    samples.write_text("".join(json.dumps({"call": r["call"], "step": r["step"]}) + "\n" for r in rows))
    reward = CoderReward([], "triton", None, None, None, log, samples)
    reward.start_at(2)
    assert reward.tally == {"1/1_ReLU": [1, 4], "1/3_Sigmoid": [2, 2]} and reward.calls == 2
    assert [r["call"] for r in map(json.loads, log.read_text().splitlines())] == [0, 0, 1]
    assert [r["call"] for r in map(json.loads, samples.read_text().splitlines())] == [0, 0, 1]
    assert keep_steps_before(log, 0) == [] and log.read_text() == ""  # a fresh start: the log starts empty


def saved_at_least(out: Path, step: int) -> bool:
    return any(
        int(p.name.split("-")[1]) >= step and (p / "trainer_state.json").exists() for p in out.glob("checkpoint-*")
    )


def step_lines(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"^sft: step (\d+)/\d+: loss ", text, re.M)]


def test_sft_interrupted_after_k_steps_resumes_at_k(tmp_path, training):
    model = build_tiny_checkpoint(tmp_path / "tiny")
    data = tmp_path / "sft.jsonl"
    rows = [
        {"prompt": [{"role": "user", "content": f"write kernel {i}"}], "completion": [{"role": "assistant", "content": "x" * i}]}
        for i in range(1, 9)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, steps = tmp_path / "sft", 120  # a fast machine trains ~30 tiny steps a second: room for the signal
    args = [str(KZ), "sft", "--model", str(model), "--data", str(data), "--out", str(out), "--cpu", "--quiet"]
    args += ["--max-steps", str(steps), "--batch-size", "1", "--max-length", "128", "--save-steps", "1"]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kz_env(), preexec_fn=sigint_default
    )
    deadline = time.monotonic() + DEADLINE_S
    while not saved_at_least(out, 2):  # a save of the second step or later is complete (only the newest is kept)
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "kz sft never saved its second step"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 130, err
    line = [x for x in err.splitlines() if x.strip()][-1]
    match = re.fullmatch(
        rf"kz: interrupted: SFT kept (\d+) of {steps} steps in {re.escape(str(out))}/checkpoint-(\d+); "
        "run the same command again to resume",
        line,
    )
    assert match and match.group(1) == match.group(2), line
    k = int(match.group(1))
    assert 2 <= k < steps
    complete = sorted(
        int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "trainer_state.json").exists()
    )
    # the newest save is the one named; only it is kept, but an interrupt between a save and the rotation after it
    # leaves the save before it too (older, and removed when the run ends)
    assert complete[-1] == k and len(complete) <= 2, complete

    resumed = subprocess.run(args, capture_output=True, text=True, env=kz_env(), timeout=DEADLINE_S)
    assert resumed.returncode == 0, resumed.stderr
    assert f"sft: resuming at step {k} of {steps} from {out / f'checkpoint-{k}'}" in resumed.stdout
    assert step_lines(resumed.stdout) == list(range(k + 1, steps + 1))  # the steps after k, each once
    metrics = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert metrics["resumed_at_step"] == k and metrics["steps"] == steps
    assert (out / "config.json").exists() and not list(out.glob("checkpoint-*"))  # no checkpoint left behind
    assert not (out / IDENTITY).exists()


class Interrupt(Exception):
    pass


def test_grpo_interrupted_after_a_save_resumes_there_and_tells_its_rewards(
    tmp_path, plugins, one_torch_thread, training
):
    """A GRPO phase (the Coder's and the Proposer's trainer) stopped right after its second step's save resumes
    at step 2, after telling its reward functions so (they drop the log rows of later steps)."""
    from datasets import Dataset
    from transformers import TrainerCallback

    from kzcore.train.coder import GRPOSettings, run_grpo

    class Reward:
        __name__ = "zero"

        def __init__(self):
            self.started_at: list[int] = []
            self.steps: list[int] = []

        def start_at(self, step):
            self.started_at.append(step)

        def __call__(self, prompts, completions, trainer_state=None, **kwargs):
            self.steps.append(trainer_state.global_step)
            return [0.0] * len(completions)

    class StopAfterSave(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == 2:  # the third step begins: the second one's save is done
                raise Interrupt

    tiny = build_tiny_checkpoint(tmp_path / "tiny")
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"task {i}"}]} for i in range(4)])
    settings = GRPOSettings(
        max_steps=4, num_generations=2, batch_size=2, max_completion_length=8, use_cpu=True, save_steps=1
    )
    out, reward = tmp_path / "out", Reward()
    with pytest.raises(Interrupt):
        run_grpo(str(tiny), dataset, [reward], settings, out, pm=plugins(), callbacks=(StopAfterSave(),))
    assert reward.started_at == [0] and reward.steps == [0, 1]
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-2"]
    metrics = run_grpo(str(tiny), dataset, [reward], settings, out, pm=plugins())
    assert reward.started_at == [0, 2] and reward.steps == [0, 1, 2, 3]
    assert metrics["resumed_at_step"] == 2 and metrics["steps"] == 4
    assert not list(out.glob("checkpoint-*")) and (out / "config.json").exists()
