"""`kz train --dry-run`: the plan of a run without training it — checked in CI on the 8-GPU recipe, which
cannot run here (no GPUs, no 7B weights): every component it names is built or looked up, and a layout TRL
would refuse at launch fails here first."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from kzcore.errors import KzError
from kzcore.train.config import load_config
from kzcore.train.plan import _with_decoders, batch_layout, format_plan, launcher_processes, training_plan

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "configs" / "kernelzero-8gpu.toml"
ACCELERATE = ROOT / "configs" / "accelerate" / "zero3-8gpu.yaml"


def test_the_8gpu_recipe_plan(plugins):
    pm = plugins("kz_triton", "kz_cuda", "kz_models")
    config = load_config(RECIPE)
    plan = training_plan(config, launcher_processes(str(ACCELERATE), None), pm=pm)
    assert plan["processes"] == 8
    assert [p["id"] for p in plan["phases"]][:4] == ["00-distill", "00-sft", "01-proposer", "01-coder"]
    assert len(plan["phases"]) == 2 + 4 * 2
    coder = plan["coder_batch"]
    assert (coder["completions_per_process"], coder["completions_per_step"], coder["prompts_per_step"]) == (10, 80, 16)
    assert coder["generation"] == "vLLM (colocate)"
    assert plan["evaluator"]["placement"].startswith("1 worker(s) per process, on that process's own GPU")
    assert plan["evaluator"]["total"] == 8
    assert plan["models"]["coder"]["here"] is False  # the weights live on the target machine only
    assert all("missing here" in str(v) for v in plan["problems"]["heldout"].values())
    assert plan["problems"]["tasks"] == {"builtin": 40}
    lines = format_plan(plan)
    assert lines[0] == "processes: 8 (one GPU each)"
    assert any(line.startswith("Coder step: 16 prompt(s) x 5 = 80 completions") for line in lines)
    assert any(line.startswith("warning: distillation") for line in lines)  # not rank-aware yet, said so


def test_the_one_gpu_plan_names_the_decoders_the_probe_and_the_proposer_cold_start(plugins):
    """configs/gpu-small.toml's plan: generation through transformers or the plugins that implement
    kz_fast_generate (named only when one is installed), the held-out problems kept by name, the training
    probe and the Proposer's cold start."""
    config = load_config(ROOT / "configs" / "gpu-small.toml")
    pm = plugins("kz_triton", "kz_cuda", "kz_models")
    plan = training_plan(config, 1, pm=pm)
    assert plan["coder_batch"]["generation"] == "transformers generate, or kz_fast_generate from plugin kz_models"
    lines = format_plan(plan)
    assert "held-out problems kept (heldout_names): 3_Sigmoid, 5_Softplus, 8_MeanReduction, 4_Gemm_Sigmoid_Mul" in lines
    assert any(line.endswith(f"with {config.heldout.probe} fixed training problems (the probe)") for line in lines)
    assert f"Proposer cold start: {config.proposer.cold_start_steps} SFT steps" in "\n".join(lines)
    assert f"Coder tasks calibrated before the first Coder phase: {config.task_mix.calibrate} samples of each" in lines
    assert f"cold-start or task module uses is drawn {config.proposer.unseen_weight:g} as often" in "\n".join(lines)
    pm.unregister(name="kz_models")  # no plugin with a faster decoder: transformers alone
    assert _with_decoders({"generation": "transformers generate"}, pm)["generation"] == "transformers generate"


def test_the_plan_states_the_coder_method(plugins):
    """The plan's Coder method line: CA-GRPO, or a control with the compute it matches (the Coder's steps and
    sequences per step, as SFT micro-batches of ``[sft] batch_size`` accumulated)."""
    pm = plugins("kz_triton", "kz_cuda", "kz_models")
    lines = {}
    for name in ("gpu-small", "gpu-small-sft", "gpu-small-rft"):
        where = ROOT / "configs" if name == "gpu-small" else ROOT / "experiments" / "learning_signal" / "configs"
        plan = training_plan(load_config(where / f"{name}.toml"), 1, pm=pm)
        (lines[name],) = [line for line in format_plan(plan) if line.startswith("Coder method:")]
    assert plan["coder_method"] == {
        "method": "rft", "steps": 8, "sequences_per_step": 32, "micro_batch": 8, "grad_accum": 4,
        "learning_rate": 1e-4, "tasks": 32, "samples_per_task": 8,
    }  # fmt: skip
    assert lines["gpu-small"] == "Coder method: ca-grpo (GRPO with CA-GRPO rewards), 8 steps x 32 sequences a phase"
    assert lines["gpu-small-sft"].startswith("Coder method: sft (a control, no RL): SFT continued on the cold start's")
    assert "8 steps x 32 sequences a phase (micro-batches of 8 x 4 accumulated" in lines["gpu-small-sft"]
    assert lines["gpu-small-rft"].startswith("Coder method: rft (a control, no RL): 32 tasks drawn as for CA-GRPO x 8")
    # on two processes a step's sequences double, as CA-GRPO's completions per step do
    two = training_plan(load_config(ROOT / "configs" / "gpu-small.toml"), 2, pm=pm)
    assert two["coder_method"]["sequences_per_step"] == two["coder_batch"]["completions_per_step"] == 64
    rft = load_config(ROOT / "experiments" / "learning_signal" / "configs" / "gpu-small-rft.toml")
    assert any("not rank-aware" in w and "rft" in w for w in training_plan(rft, 2, pm=pm)["warnings"])
    assert not any("rft" in w for w in two["warnings"] + training_plan(rft, 1, pm=pm)["warnings"])


def test_a_layout_trl_would_refuse_fails_in_the_plan():
    config = load_config(RECIPE)
    with pytest.raises(
        KzError, match=r"\[coder\] batch_size 10 x 3 process\(es\) = 30 .* not a multiple of num_generations 4"
    ):
        batch_layout(attrs.evolve(config.coder, num_generations=4), 3, "coder")
    assert batch_layout(config.coder, 1, "coder")["prompts_per_step"] == 2


def test_processes_from_the_flag_the_accelerate_file_or_one(tmp_path):
    assert launcher_processes(None, None) == 1
    assert launcher_processes(str(ACCELERATE), 2) == 2
    bad = tmp_path / "a.yaml"
    bad.write_text("num_processes: eight\n")
    with pytest.raises(KzError, match="num_processes must be a positive integer"):
        launcher_processes(str(bad), None)
    with pytest.raises(KzError, match="no such accelerate config"):
        launcher_processes(str(tmp_path / "none.yaml"), None)


def test_an_unknown_language_fails_the_plan(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[plugins]\nlanguages = ["fortran"]\n')
    with pytest.raises(KzError, match="no plugin handles language 'fortran'"):
        training_plan(load_config(config))


def test_kz_train_dry_run_of_the_8gpu_recipe(tmp_path):
    """What CI runs: the recipe's plan prints, exit 0, and nothing is trained or written."""
    from tests.test_cli_subprocess import kz

    run_dir = tmp_path / "run"
    proc = kz(
        "train", "--config", str(RECIPE), "--dry-run", "--accelerate-config", str(ACCELERATE), "--run-dir", str(run_dir)
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "processes: 8 (one GPU each)"
    assert "evaluator: local, 1 worker(s) per process, on that process's own GPU (LOCAL_RANK)" in lines
    assert "coder: /models/Qwen2.5-Coder-7B-Instruct (checkpoint directory, missing here)" in lines
    assert not run_dir.exists()


def test_processes_without_dry_run_is_a_usage_error(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[schedule]\nrounds = 1\n")
    from tests.test_cli_subprocess import kz

    proc = kz("train", "--config", str(config), "--processes", "2")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "kz: error: --processes and --accelerate-config only go with --dry-run (launch with accelerate launch)"
    )


def test_the_self_play_configs_differ_from_their_kernelbench_seed_in_what_their_comments_say(plugins):
    """experiments/kernelbench/configs/sp-seedN.toml: kb-seedN.toml with per-API Proposer examples, chains in the
    cold start, half the Coder's prompts open to the Proposer's batch and 4 Proposer steps a round; the frozen
    ablation differs from it only in the frozen Proposer. The plan says each of those."""
    pm = plugins("kz_triton", "kz_cuda", "kz_models")
    where = ROOT / "experiments" / "kernelbench" / "configs"
    for n in (0, 1, 2):
        kb, sp, frozen = (
            load_config(where / f"{name}.toml") for name in (f"kb-seed{n}", f"sp-seed{n}", f"sp-seed{n}-frozen")
        )
        assert (sp.run.seed, sp.run.dir) == (kb.run.seed, f"runs/sp-seed{n}")
        assert (
            attrs.evolve(
                sp,
                run=kb.run,
                distill=attrs.evolve(sp.distill, chains=0),
                task_mix=attrs.evolve(sp.task_mix, builtin=kb.task_mix.builtin),
                schedule=attrs.evolve(sp.schedule, proposer_steps=kb.schedule.proposer_steps),
                proposer=attrs.evolve(sp.proposer, examples="suite"),
            )
            == kb
        )
        assert (
            attrs.evolve(frozen, run=sp.run, schedule=attrs.evolve(frozen.schedule, freeze_proposer_at_step=None)) == sp
        )
    lines = format_plan(training_plan(sp, 1, pm=pm))
    assert (
        "distillation adds at most 400 verified variants of the cold-start problems and 48 chains of two elementwise ops"
        in lines
    )
    assert any(
        line.startswith("Coder tasks per phase: 50% from the Proposer's newest accepted batch") for line in lines
    )
    assert "Proposer prompt examples: a cold-start module for each requested API, then the suite's (per-api)" in lines
    assert any(line.startswith("phases: 00-distill, 00-sft, 01-proposer (4 steps)") for line in lines)
    kb_lines = format_plan(training_plan(kb, 1, pm=pm))
    assert "Proposer prompt examples: two modules of the built-in suite (suite, the method's)" in kb_lines


def test_a_k_above_n_is_named_in_the_plan_not_dropped_unsaid(plugins, tmp_path):
    pm = plugins("kz_triton", "kz_cuda", "kz_models")
    config = tmp_path / "c.toml"
    config.write_text("[heldout]\nn = 4\nk = [1, 4, 10]\n")
    loaded = load_config(config)
    assert loaded.heldout.ks() == [1, 4]
    plan = training_plan(loaded, pm=pm)
    assert plan["heldout"]["k"] == [1, 4] and plan["heldout"]["k_above_n"] == [10]
    (line,) = [x for x in format_plan(plan) if x.startswith("held-out: ")]
    assert line.startswith("held-out: n = 4, pass@k for k in [1, 4] (not [10]: above n), after ")
