"""Evaluator settings defined once: EvalConfig's fields carry their help, `kz eval`'s options
are generated from them and build the EvalConfig back, and docs/evaluator.md's settings table is theirs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import attrs
import pytest

from kzcore.cli import _add_eval_args, _config_from, build_parser
from kzcore.types import EvalConfig

DOC = Path(__file__).resolve().parent.parent / "docs" / "evaluator.md"
FIELDS = attrs.fields(EvalConfig)


def subparser(*names: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in names:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = action.choices[name]
    return parser


def option_of(parser: argparse.ArgumentParser, field: attrs.Attribute) -> argparse.Action | None:
    """The option that sets ``field``: its own dest, or no_NAME for a --no-NAME switch."""
    actions = [a for a in parser._actions if a.dest in (field.name, f"no_{field.name}")]
    assert len(actions) <= 1, f"{field.name}: more than one option"
    return actions[0] if actions else None


def parse_eval(*argv: str) -> EvalConfig:
    return _config_from(build_parser().parse_args(["eval", "--problems", "builtin", *argv]))


def cli_defaults() -> dict:
    return {f.name: f.metadata["cli_default"] for f in FIELDS if "cli_default" in f.metadata}


def test_every_setting_has_help_and_a_kz_eval_option():
    eval_parser = subparser("eval")
    for field in FIELDS:
        assert field.metadata.get("help"), f"EvalConfig.{field.name} has no help text"
        action = option_of(eval_parser, field)
        if "no_cli" in field.metadata:
            assert action is None, f"{field.name} is marked no_cli but kz eval has an option for it"
            assert field.metadata["no_cli"].strip(), f"{field.name}: no_cli needs the reason"
            continue
        assert action is not None, f"EvalConfig.{field.name} has no kz eval option (or no_cli reason)"
        assert field.metadata["help"] in action.help
    options = {s for a in eval_parser._actions for s in a.option_strings}
    # spellings docs and tests rely on
    assert {"--timeout", "--no-problem-check", "--second-shape", "--tf32", "--min-reps", "--device"} <= options
    assert option_of(eval_parser, attrs.fields(EvalConfig).device).choices == ("auto", "cpu", "cuda")


def test_kz_eval_defaults_are_evalconfig_defaults():
    assert parse_eval() == attrs.evolve(EvalConfig(), **cli_defaults())
    distill = build_parser().parse_args(["distill", "--teacher", "t", "--problems", "builtin"])
    assert _config_from(distill) == parse_eval()


def test_defaults_shown_in_help_are_the_fields():
    text = " ".join(subparser("eval").format_help().split())
    for field in FIELDS:
        default = field.metadata.get("cli_default", field.default)
        if not isinstance(default, bool) and "no_cli" not in field.metadata:
            assert f"(default: {default})" in text, field.name


def test_non_default_flags_round_trip():
    config = parse_eval("--trials", "2", "--atol", "1e-3", "--second-shape", "none", "--no-problem-check")
    assert config == attrs.evolve(EvalConfig(), trials=2, atol=1e-3, second_shape="", problem_check=False)
    config = parse_eval("--timeout", "30", "--tf32", "--no-flush-l2", "--device", "cpu", "--input-variation", "full")
    assert config == attrs.evolve(EvalConfig(), timeout_s=30.0, tf32=True, flush_l2=False, device="cpu",
                                  input_variation="full")  # fmt: skip
    assert parse_eval("--second-shape", "").second_shape == ""
    assert parse_eval("--second-shape", "alt2", "--min-reps", "30").min_reps == 30
    assert isinstance(parse_eval("--timeout", "30").timeout_s, float)


@pytest.mark.parametrize("argv", [["--device", "gpu"], ["--trials", "two"], ["--input-variation", "wild"]])
def test_bad_values_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_eval(*argv)
    assert exc.value.code == 2
    assert f"argument {argv[0]}" in capsys.readouterr().err


def test_problem_check_commands_take_their_own_subset():
    """kz suite check and kz propose declare device/size/timeout only, with a problem check's own timeout;
    every other field (propose's --seed too, which seeds its API sets) stays EvalConfig's."""
    check = build_parser().parse_args(["suite", "check", "builtin", "--device", "cpu"])
    assert _config_from(check) == EvalConfig(device="cpu", timeout_s=120.0)
    propose = build_parser().parse_args(["propose", "--seed", "5", "--timeout", "9"])
    assert _config_from(propose) == EvalConfig(timeout_s=9.0)
    assert not hasattr(propose, "trials")
    with pytest.raises(ValueError, match="no EvalConfig option for timeout"):
        _add_eval_args(argparse.ArgumentParser(), ("device", "timeout"))  # the field is timeout_s


# ----------------------------------------------------------------------------------------------------
# docs/evaluator.md's settings table
# ----------------------------------------------------------------------------------------------------


def settings_table() -> str:
    eval_parser = subparser("eval")
    rows = ["| setting (`[eval]` key) | `kz eval` option | default | what it does |", "| --- | --- | --- | --- |"]
    for field in FIELDS:
        action = option_of(eval_parser, field)
        option = f"`{action.option_strings[0]}`" if action else f"none: {field.metadata['no_cli']}"
        default = f"`{json.dumps(field.default)}`"
        if "cli_default" in field.metadata:
            default += f" (`kz eval`: `{json.dumps(field.metadata['cli_default'])}`)"
        what = field.metadata["help"].replace("|", "\\|")
        rows.append(f"| `{field.name}` | {option} | {default} | {what} |")
    return "\n".join(rows) + "\n"


def test_settings_table_is_the_fields():
    text = DOC.read_text()
    start = text.index("| setting (`[eval]` key)")
    end = text.index("\n\n", start) + 1
    expected = settings_table()
    assert text[start:end] == expected, f"docs/evaluator.md's settings table is stale; it should read:\n{expected}"
