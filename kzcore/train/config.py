"""`kz train --config FILE.toml`: the trainer's configuration, one attrs class per section. Unknown keys
are errors (a typo must not silently fall back to a default). docs/training.md lists every key."""

from __future__ import annotations

import sys
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.train.ca_grpo import CAGRPOConfig
from kzcore.train.coder import GRPOSettings
from kzcore.train.schedule import Schedule
from kzcore.train.sft import SFTSettings
from kzcore.types import EvalConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class ConfigError(KzError):
    pass


@attrs.frozen
class RunSection:
    dir: str = "runs/train"
    seed: int = 0


@attrs.frozen
class ModelsSection:
    coder: str = "smollm2"  # a checkpoint directory, or a policy spec whose policy exposes .checkpoint
    proposer: str = "same"  # "same": one model in two roles; else its own checkpoint / spec


@attrs.frozen
class PluginsSection:
    languages: tuple[str, ...] = attrs.field(default=("triton",), converter=tuple)
    executor: str = "local"
    generation: str = "hf"  # policy backend that samples a checkpoint outside GRPO (held-out, Coder pass rates)
    workers: int | None = None
    load: tuple[str, ...] = attrs.field(default=(), converter=tuple)  # extra importable plugin specs


@attrs.frozen
class ProblemsSection:
    coldstart: str = "builtin"  # problems the teacher solves for distillation
    tasks: str = "builtin"  # the initial Coder task pool (the Proposer adds to it)
    heldout: str = ""  # evaluated after every round; never used for training ("" = none)
    heldout_names: tuple[str, ...] = attrs.field(default=(), converter=tuple)  # keep only these (empty: all)
    exclude_heldout: bool = True


@attrs.frozen
class DistillSection:
    teacher: str = "solutions:builtin"  # "solutions:SUITE" or a policy spec
    k: int = 4
    only_faster: bool = False
    template: str = "principles"
    variants: int = 0  # at most this many verified variant problems (kzcore/train/variants.py); 0: none
    variant_seed: int = 0  # which variants, when there are more than ``variants``
    keep_reasoning: bool = True  # train on the teacher's whole answer; False: only its fenced code
    max_new_tokens: int = 4096  # the teacher's sampling budget per answer


@attrs.frozen
class ProposerSection:
    k: int = 4  # Coder samples per valid module for its pass rate
    set_size: tuple[int, int] = attrs.field(default=(1, 4), converter=tuple)
    shape: str = "tent"
    at_edges: float = 0.0
    gate_penalty: float = -1.0


@attrs.frozen
class HeldoutSection:
    n: int = 4
    k: tuple[int, ...] = attrs.field(default=(1,), converter=tuple)
    max_new_tokens: int = 1024
    temperature: float = 0.7


@attrs.frozen
class TrainConfig:
    run: RunSection = RunSection()
    models: ModelsSection = ModelsSection()
    plugins: PluginsSection = PluginsSection()
    problems: ProblemsSection = ProblemsSection()
    schedule: Schedule = Schedule()
    distill: DistillSection = DistillSection()
    sft: SFTSettings = SFTSettings()
    coder: GRPOSettings = GRPOSettings()
    ca_grpo: CAGRPOConfig = CAGRPOConfig()
    proposer: ProposerSection = ProposerSection()
    proposer_grpo: GRPOSettings = GRPOSettings(num_generations=4, batch_size=4, max_completion_length=768)
    eval: EvalConfig = EvalConfig()
    heldout: HeldoutSection = HeldoutSection()


def _build(cls, data: dict, where: str):
    fields = {f.name: f for f in attrs.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(fields)}")
    kwargs = {}
    for name, value in data.items():
        field = fields[name]
        if isinstance(value, dict) and attrs.has(type(field.default)):
            kwargs[name] = _build(type(field.default), value, f"{where}.{name}" if where else name)
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"[{where or 'config'}]: {exc}") from None


def load_config(path: Path) -> TrainConfig:
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return _build(TrainConfig, data, "")
