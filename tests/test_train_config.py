"""`kz train` configs: the shipped ones load, unknown keys and bad values are one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from kzcore.cli import main
from kzcore.train.config import ConfigError, load_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
EXPERIMENT_CONFIGS = CONFIGS.parent / "experiments" / "learning_signal" / "configs"


@pytest.mark.parametrize(
    "path", sorted(CONFIGS.glob("*.toml")) + sorted(EXPERIMENT_CONFIGS.glob("*.toml")), ids=lambda p: p.name
)
def test_shipped_configs_load(path):
    config = load_config(path)
    assert config.schedule.phases(), "a config that schedules nothing is useless"
    assert config.coder.batch_size % config.coder.num_generations == 0


def test_smoke_config_values():
    config = load_config(CONFIGS / "smoke.toml")
    assert (config.schedule.rounds, config.schedule.proposer_steps, config.schedule.coder_steps) == (1, 1, 2)
    assert config.models.proposer == "same" and config.heldout.k == (1, 2)
    assert config.eval.trials == 2 and config.coder.use_cpu


def test_unknown_key_names_the_section(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[coder]\nnum_generation = 4\n")
    with pytest.raises(ConfigError, match=r"\[coder\]: unknown key\(s\) num_generation"):
        load_config(bad)


def test_plugins_are_not_loaded_from_a_config(tmp_path):
    """Which plugins load is the entry points' and KZ_LOAD_PLUGINS' business: a ``[plugins] load`` key is
    refused as unknown, not silently ignored."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[plugins]\nload = ["kz_mylang"]\n')
    with pytest.raises(ConfigError, match=r"\[plugins\]: unknown key\(s\) load; known: languages, executor") as info:
        load_config(bad)
    assert "\n" not in str(info.value)


def test_bad_value_and_bad_toml(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[ca_grpo]\nspeed = 'fastest'\n")
    with pytest.raises(ConfigError, match=r"\[ca_grpo\]"):
        load_config(bad)
    bad.write_text("[run\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_kz_train_missing_config_is_one_line_error(capsys, tmp_path):
    assert main(["train", "--config", str(tmp_path / "nope.toml")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kz: error:") and "no such config file" in err and "\n" not in err


def test_the_gpu_learning_runs_differ_where_they_say():
    main_run = load_config(CONFIGS / "gpu-small.toml")
    seed1 = load_config(EXPERIMENT_CONFIGS / "gpu-small-seed1.toml")
    frozen = load_config(EXPERIMENT_CONFIGS / "gpu-small-frozen.toml")
    assert main_run.problems.tasks == "coldstart" and main_run.coder.max_completion_length >= 1024
    assert main_run.coder.num_generations >= 8 and main_run.sft.max_length >= 1536
    assert (seed1.run.seed, seed1.sft.seed, seed1.coder.seed, seed1.proposer_grpo.seed) == (1, 1, 1, 1)
    assert frozen.schedule.freeze_proposer_at_step == 0 and frozen.run.seed == 0
    dirs = {main_run.run.dir, seed1.run.dir, frozen.run.dir}
    assert len(dirs) == 3  # three runs side by side on one machine


def test_the_coder_method_is_ca_grpo_or_a_control(tmp_path):
    """``[coder] method``: CA-GRPO unless a config names one of the two controls; anything else is a one-line
    error naming the three. The Proposer's GRPO section has no such key."""
    path = tmp_path / "c.toml"
    path.write_text("[coder]\nbatch_size = 4\n")
    assert load_config(path).coder.method == "ca-grpo"
    for method in ("sft", "rft", "ca-grpo"):
        path.write_text(f'[coder]\nmethod = "{method}"\n')
        assert load_config(path).coder.method == method
    path.write_text('[coder]\nmethod = "grpo"\n')
    with pytest.raises(
        ConfigError, match=r"\[coder\] method must be one of 'ca-grpo', 'sft', 'rft', got 'grpo'"
    ) as info:
        load_config(path)
    assert "\n" not in str(info.value)
    path.write_text('[proposer_grpo]\nmethod = "sft"\n')
    with pytest.raises(ConfigError, match=r"\[proposer_grpo\]: unknown key\(s\) method"):
        load_config(path)


def test_the_control_arms_differ_from_the_ca_grpo_run_in_the_coder_method_alone():
    import attrs

    main_run = load_config(CONFIGS / "gpu-small.toml")
    assert main_run.coder.method == "ca-grpo"
    dirs = {main_run.run.dir}
    for method in ("sft", "rft"):
        control = load_config(EXPERIMENT_CONFIGS / f"gpu-small-{method}.toml")
        assert control.coder.method == method
        dirs.add(control.run.dir)
        as_main = attrs.evolve(control, run=main_run.run, coder=attrs.evolve(control.coder, method="ca-grpo"))
        assert as_main == main_run
    assert len(dirs) == 3  # side by side: each run its own directory


def test_fork_run_copies_the_cold_start_up_to_the_phase_asked(tmp_path):
    import json
    import subprocess
    import sys

    src = tmp_path / "src"
    for pid in ("00-distill", "00-sft", "01-proposer"):
        (src / "phases" / pid).mkdir(parents=True)
        (src / "phases" / pid / "marker").write_text(pid)
    (src / "heldout" / "00-base").mkdir(parents=True)
    (src / "heldout" / "00-sft").mkdir(parents=True)
    metrics = {pid: {"seconds": 1.0} for pid in ("00-distill", "00-sft", "01-proposer")}
    (src / "state.json").write_text(json.dumps({"done": list(metrics), "metrics": metrics}))
    rows = [{"phase": p} for p in ("00-base", "00-sft", "01-coder")]
    (src / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fork = [sys.executable, str(CONFIGS.parent / "experiments" / "learning_signal" / "fork_run.py")]
    subprocess.run([*fork, str(src), str(tmp_path / "a"), "--after", "distill"], check=True)
    subprocess.run([*fork, str(src), str(tmp_path / "b")], check=True)
    a, b = (json.loads((tmp_path / d / "state.json").read_text()) for d in ("a", "b"))
    assert a["done"] == ["00-distill"] and b["done"] == ["00-distill", "00-sft"]
    assert sorted(p.name for p in (tmp_path / "a" / "phases").iterdir()) == ["00-distill"]
    assert not (tmp_path / "a" / "heldout.jsonl").exists()  # its own base and SFT evaluations are to come
    kept = [json.loads(x)["phase"] for x in (tmp_path / "b" / "heldout.jsonl").read_text().splitlines()]
    assert kept == ["00-base", "00-sft"]
    refused = subprocess.run([*fork, str(tmp_path / "a"), str(tmp_path / "c")], capture_output=True, text=True)
    assert refused.returncode != 0 and "has not finished 00-sft" in refused.stderr


@pytest.mark.parametrize(
    ("heldout", "message"),
    [
        ("n = 0", "n must be at least 1"),
        ("k = [0, 1]", "k must list integers of at least 1"),
        ("k = []", "k must list integers of at least 1"),
        ("n = 2\nk = [4, 10]", r"every k \(\[4, 10\]\) is above n = 2"),
        ("max_new_tokens = 0", "max_new_tokens must be at least 1"),
        ("temperature = -0.5", "temperature must be 0"),
    ],
)
def test_a_held_out_setting_that_cannot_score_is_a_one_line_error(tmp_path, heldout, message):
    """Before any GPU time is spent: pass@0, no sample per problem or no k that n samples can estimate would
    leave the held-out score empty or meaningless."""
    bad = tmp_path / "bad.toml"
    bad.write_text(f"[heldout]\n{heldout}\n")
    with pytest.raises(ConfigError, match=r"\[heldout\]: " + message) as info:
        load_config(bad)
    assert "\n" not in str(info.value)


def test_every_shipped_config_loads_under_the_validation():
    """Every config the project ships (configs/ and each experiment's) passes the up-front checks."""
    paths = sorted(CONFIGS.glob("*.toml")) + sorted(CONFIGS.parent.glob("experiments/*/configs/*.toml"))
    assert len(paths) > 10
    for path in paths:
        if path.name.startswith("."):
            continue
        load_config(path)
