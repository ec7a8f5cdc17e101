"""The run's saved models: the checkpoint each role starts from, the saved model each phase trains on (the
newest a finished phase left), the best phase by held-out pass@1, and pruning the rest (``[run]
keep_checkpoints``). Which phases finished is kzcore.train.schedule's state file; resuming inside a phase, from
the newest step its trainer saved, is kzcore.train.trl_run's."""

from __future__ import annotations

import shutil
from pathlib import Path

import attrs

from kzcore.errors import KzError
from kzcore.jsonl import read_jsonl
from kzcore.policy import load_policy, parse_policy_spec
from kzcore.train.schedule import read_state

PROPOSER_COLD_START = "proposer"  # the SFT phase's Proposer model, beside its Coder model
HELDOUT_LOG = "heldout.jsonl"  # RUN/heldout.jsonl: one row of held-out metrics per evaluated phase
PRUNED = "config.json.pruned"  # a pruned model's config.json, renamed: its logs stay, it is never started from
WEIGHTS = (".safetensors", ".bin", ".pt")


def resolve_checkpoint(spec: str, pm=None) -> str:
    """A trainable checkpoint directory for a model spec: a directory as is (also as ``hf:DIR``), else the
    ``checkpoint`` a policy built from the spec exposes (``smollm2`` converts its GGUF once and returns the
    directory)."""
    if Path(spec).is_dir():
        return str(Path(spec))
    name, arg = parse_policy_spec(spec)
    if name == "hf" and arg and (Path(arg) / "config.json").is_file():
        return str(Path(arg))
    policy = load_policy(spec, pm=pm)
    try:
        path = getattr(policy, "checkpoint", None)
    finally:
        policy.close()
    if not path or not Path(path).is_dir():
        raise KzError(f"model {spec!r}: not a directory, and its policy exposes no trainable checkpoint")
    return str(path)


def best_phase(run_dir: Path) -> str | None:
    """The finished phase whose model scored the best held-out pass@1 (the earliest of ties)."""
    path = run_dir / HELDOUT_LOG
    if not path.exists():
        return None
    rows = read_jsonl(path)
    scored = [(r.get("heldout_pass@1"), i, r["phase"]) for i, r in enumerate(rows) if r["phase"] != "00-base"]
    scored = [(s, -i, pid) for s, i, pid in scored if s is not None]
    return max(scored)[2] if scored else None


@attrs.frozen
class Checkpoints:
    """The models of the run in ``run_dir``: ``base`` is where the Coder starts, ``proposer_base`` where the
    Proposer does; ``shared`` when one model plays both roles (``[models] proposer = "same"``); ``keep`` is
    ``[run] keep_checkpoints``."""

    run_dir: Path
    base: str
    proposer_base: str
    shared: bool
    keep: str

    @classmethod
    def for_config(cls, config, pm) -> Checkpoints:
        """The run's checkpoints, its base models resolved (`resolve_checkpoint`; one spec in two roles is
        loaded once). A Proposer cold start has a Proposer model of its own (`TrainConfig` refuses one without)."""
        base = resolve_checkpoint(config.models.coder, pm)
        same = config.models.proposer in ("same", config.models.coder)
        proposer_base = base if same else resolve_checkpoint(config.models.proposer, pm)
        shared = config.models.proposer == "same"
        return cls(Path(config.run.dir), base, proposer_base, shared=shared, keep=config.run.keep_checkpoints)

    def phase_model(self, pid: str, name: str = "model") -> Path:
        """Where phase ``pid`` saves its model (``name`` ``PROPOSER_COLD_START``: the SFT phase's Proposer)."""
        return self.run_dir / "phases" / pid / name

    def latest(self, role: str) -> str:
        """The newest saved model for ``role`` ("coder" or "proposer"); with one model in two roles, the
        newest of any phase. Falls back to the base checkpoint."""
        roles = {"sft", "coder", "proposer"} if self.shared else ({"sft", "coder"} if role == "coder" else {"proposer"})
        for pid in reversed(read_state(self.run_dir)["done"]):
            model = self.phase_model(pid)
            if pid.split("-", 1)[1] in roles and (model / "config.json").exists():
                return str(model)
            cold_start = self.phase_model(pid, PROPOSER_COLD_START)
            if role == "proposer" and not self.shared and (cold_start / "config.json").exists():
                return str(cold_start)
        return self.base if role == "coder" or self.shared else self.proposer_base

    def prune(self) -> list[str]:
        """With ``keep`` "last-best", delete the weights of finished phases' models that no later phase starts
        from and that are not the best by held-out pass@1 (their logs stay, their config.json is renamed
        ``PRUNED``); returns the pruned models (phase ids, ``PHASE/proposer`` for a cold start's Proposer)."""
        if self.keep == "all":
            return []
        keep = {self.latest("coder"), self.latest("proposer")}
        best = best_phase(self.run_dir)
        if best:
            keep.add(str(self.phase_model(best)))
        deleted = []
        for pid in read_state(self.run_dir)["done"]:
            for name in ("model", PROPOSER_COLD_START):
                model = self.phase_model(pid, name)
                if (model / "config.json").exists() and str(model) not in keep:
                    for item in model.iterdir():
                        if item.suffix in WEIGHTS or item.name.startswith("checkpoint-"):
                            shutil.rmtree(item) if item.is_dir() else item.unlink()
                    (model / "config.json").rename(model / PRUNED)
                    deleted.append(pid if name == "model" else f"{pid}/{name}")
        return deleted
