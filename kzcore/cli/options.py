"""What several `kz` commands share: the parser classes, the options declared once (evaluator settings,
policy sampling, --only) and reading them back, loading a problem spec, and the usage error."""

from __future__ import annotations

import argparse
from pathlib import Path

from kzcore.errors import KzError

DEFAULT_POLICY = "smollm2"
KERNELBENCH_HELP = (
    "KernelBench checkout for --problems kernelbench[:levels] "
    "(default: $KZ_KERNELBENCH, else the registered suite kernelbench: kz_suites' copy of levels 1 and 2)"
)
INCLUDE_DEGENERATE_HELP = "count problems that failed the problem check (degenerate outputs) in the scores"


class UsageError(KzError):
    """A command line that cannot work as given: one line, exit 2 (argparse's usage-error status)."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, unless the default says nothing (None, off, empty) or
    the help already names it."""

    def _get_help_string(self, action):
        help = action.help or ""
        says_nothing = action.default is None or action.default is False or action.default == []
        if says_nothing or action.default is argparse.SUPPRESS or "default" in help:
            return help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help shows defaults; subcommand parsers are made of the same class."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def ranged(kind, low, high=None, *, low_open: bool = False):
    """An argparse type: ``kind`` of the text, in [low, high] (``low_open``: above low); outside it, argparse's
    one-line usage error (exit 2) names the option and the range, before anything loads."""

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a{'n integer' if kind is int else ' number'}: {text!r}") from None
        if not (value > low if low_open else value >= low) or (high is not None and not value <= high):
            bounds = f"{'above' if low_open else 'at least'} {low}" + (
                f" and at most {high}" if high is not None else ""
            )
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value

    convert.__name__ = kind.__name__
    return convert


def _add_workers(parser) -> None:
    """``--workers``, the same for every command that runs a pool of evaluator workers."""
    parser.add_argument(
        "--workers", type=ranged(int, 1), default=None, help="worker processes (default: one per GPU, or cores/2)"
    )


def _add_policy_args(parser, policy_help: str, default: str | None = DEFAULT_POLICY) -> None:
    """The policy and its sampling options, for the commands that sample (`kz sample`, `kz eval --policy`)."""
    parser.add_argument("--policy", default=default, metavar="NAME[:ARG]", help=policy_help)
    parser.add_argument("-n", type=ranged(int, 1), default=1, help="samples per problem")
    parser.add_argument("--temperature", type=ranged(float, 0), default=0.7, help="sampling temperature (0: greedy)")
    parser.add_argument(
        "--top-p", type=ranged(float, 0, 1, low_open=True), default=0.95,
        help="nucleus sampling: keep this much probability mass",
    )  # fmt: skip
    parser.add_argument("--max-new-tokens", type=ranged(int, 1), default=1024, help="most tokens per completion")
    parser.add_argument("--template", default="kernelbench", help="prompt template: kernelbench | principles")
    parser.add_argument("--batch-size", type=ranged(int, 1), default=8, help="prompts per generate call")


def _add_only(parser, verb: str, example: str = "") -> None:
    """``--only NAMES``, the same for every command that takes a suite (`_only` reads it)."""
    parser.add_argument(
        "--only", default=None, metavar="NAMES",
        help=f"{verb} only these problems (comma-separated names or level/name keys){example}",
    )  # fmt: skip


def _only(problems, names: str | None, spec: str) -> list:
    """The problems named in the comma-separated ``names`` (a name or a level/name key), in the suite's order;
    all when ``names`` is None. A name the suite lacks is an error naming it."""
    if names is None:
        return problems
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    missing = [n for n in wanted if not any(n in (p.name, p.key) for p in problems)]
    if missing or not wanted:
        raise KzError(f"--only: no problem {', '.join(map(repr, missing)) or '(none named)'} in {spec}")
    return [p for p in problems if p.name in wanted or p.key in wanted]


def _eval_fields(names=None) -> list:
    """EvalConfig's fields that have a command-line option: all, or those in ``names``."""
    import attrs

    from kzcore.types import EvalConfig

    fields = [f for f in attrs.fields(EvalConfig) if "no_cli" not in f.metadata]
    if names is None:
        return fields
    if unknown := set(names) - {f.name for f in fields}:
        raise ValueError(f"no EvalConfig option for {', '.join(sorted(unknown))}")
    return [f for f in fields if f.name in names]


def _eval_option(field) -> tuple[str, dict, bool]:
    """(flag, argparse keywords, negated) of an EvalConfig field's option, all read from the field and its
    metadata (`kzcore.eval_config._setting`). A bool is a switch away from its default: ``--NAME`` turns on one
    that is off, ``--no-NAME`` (negated: its value is ``not`` the switch's) turns off one that is on."""
    import typing

    from kzcore.types import EvalConfig

    meta = field.metadata
    default = meta.get("cli_default", field.default)
    name = field.name.replace("_", "-")
    if isinstance(default, bool):
        if default:
            options = {"action": "store_true", "dest": f"no_{field.name}", "help": f"skip {meta['help']}"}
            return meta.get("flag", f"--no-{name}"), options, True
        return meta.get("flag", f"--{name}"), {"action": "store_true", "dest": field.name, "help": meta["help"]}, False
    kind = typing.get_type_hints(EvalConfig)[field.name]
    words = meta.get("cli_values", {})

    def convert(text: str):
        return words[text] if text in words else kind(text)

    convert.__name__ = kind.__name__  # argparse names the type in its "invalid int value" errors
    flag = meta.get("flag", f"--{name}")
    options = {"type": convert, "default": default, "dest": field.name, "help": meta["help"]}
    options.update({key: meta[key] for key in ("choices", "metavar") if key in meta})
    if "choices" not in meta:  # named after the flag, as argparse would, not after the field
        options.setdefault("metavar", flag.removeprefix("--").replace("-", "_").upper())
    return flag, options, False


def _add_eval_args(parser, names=None, **overrides) -> None:
    """The evaluator options, generated from EvalConfig's fields (all, or those in ``names``); ``overrides``
    maps a field name to the argparse keywords this command sets its own way (a problem check's timeout).
    `_config_from` builds the EvalConfig back from the parsed arguments."""
    fields = _eval_fields(names)
    for field in fields:
        flag, options, _ = _eval_option(field)
        parser.add_argument(flag, **{**options, **overrides.get(field.name, {})})
    parser.set_defaults(eval_fields=tuple(f.name for f in fields))


def _config_from(args):
    """The EvalConfig of the evaluator options a command declared (`_add_eval_args`); the fields it has no
    option for keep EvalConfig's defaults."""
    from kzcore.types import EvalConfig

    values = {}
    for field in _eval_fields(args.eval_fields):
        _, options, negated = _eval_option(field)
        value = getattr(args, options["dest"])
        values[field.name] = not value if negated else value
    try:
        return EvalConfig(**values)
    except (TypeError, ValueError) as exc:  # a value out of its range (attrs' validators): one line, exit 2
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        for field in _eval_fields(args.eval_fields):  # attrs names the field: say the option's flag instead
            if message.startswith(f"'{field.name}'"):
                message = _eval_option(field)[0] + message.removeprefix(f"'{field.name}'")
        raise UsageError(message) from None


def _load_problems(spec: str, kernelbench: str | None = None):
    """``load_problems``, with a one-line error naming a suite's levels when ``spec`` asks for one it lacks.
    ``kernelbench``: the KernelBench checkout for ``kernelbench[:levels]`` (--kernelbench)."""
    from kzcore.plugins import suites
    from kzcore.problems import KERNELBENCH, KERNELBENCH_LEVELS, load_problems, parse_suite_spec

    if not Path(spec).exists():
        name, levels = parse_suite_spec(spec)
        if levels and (name in suites().items or name == KERNELBENCH):
            # KernelBench's levels are known without a checkout: the error comes before asking for one
            have = set(KERNELBENCH_LEVELS) if name == KERNELBENCH else {p.level for p in load_problems(name)}
            if missing := sorted(levels - have):
                raise KzError(
                    f"suite {name!r} has no level {', '.join(map(str, missing))}; "
                    f"its levels: {', '.join(map(str, sorted(have)))}"
                )
    return load_problems(spec, kernelbench=kernelbench)
