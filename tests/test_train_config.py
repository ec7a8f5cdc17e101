"""`kz train` configs: the shipped ones load, unknown keys and bad values are one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from kzcore.cli import main
from kzcore.train.config import ConfigError, load_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
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
