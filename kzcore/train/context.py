"""What the trainer's phases and their helpers read of a run: the config, the run directory, the plugin
manager, the log and the run's one executor. kzcore.train.trainer builds one per run and hands it to
kzcore.train.tasks, kzcore.train.scoring and kzcore.train.proposer_phase instead of the whole Trainer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from kzcore.executors import open_executor
from kzcore.policy import load_policy
from kzcore.prompts import build_prompt
from kzcore.train.schedule import phase_id
from kzcore.types import Phase, Problem

if TYPE_CHECKING:
    from kzcore.executors import Executor
    from kzcore.train.config import TrainConfig


@attrs.define
class RunContext:
    """One training run's settings and shared services. ``pm`` None means the process-wide plugin manager;
    ``executor`` is normally left out and opened on first use (a test may hand in a stand-in)."""

    config: TrainConfig
    pm: Any = None
    log: Callable[[str], None] = print
    _executor: Executor | None = attrs.field(default=None, alias="executor")

    @property
    def run_dir(self) -> Path:
        return Path(self.config.run.dir)

    @property
    def language(self) -> str:
        """The language RL trains in: the first of ``[plugins] languages``."""
        return self.config.plugins.languages[0]

    @property
    def distill_dir(self) -> Path:
        """The cold start's distill phase directory (its SFT set, its verified problems)."""
        return self.run_dir / "phases" / phase_id(Phase("distill", 0, 0))

    @property
    def executor(self) -> Executor:
        """The run's one executor (``[plugins] executor``), started on first use (a run with every phase done
        starts no workers) and closed by `close` when the run ends: the Coder's rewards, the Proposer's gates
        and pass rates, distillation and held-out evaluation all go through it."""
        if self._executor is None:
            self._executor = open_executor(
                self.config.plugins.executor, workers=self.config.plugins.workers, config=self.config.eval, pm=self.pm
            )
        return self._executor

    def close(self) -> None:
        """Close the executor, if the run started one."""
        if self._executor is not None:
            self._executor.close()

    def coder_prompt(self, problem: Problem, language: str | None = None) -> list[dict[str, str]]:
        """The Coder's prompt for ``problem``: the one function behind SFT data, RL, the Proposer's pass-rate
        sampling and held-out evaluation (``[prompts] coder_template``)."""
        template = self.config.prompts.coder_template
        return build_prompt(problem, language or self.language, template, pm=self.pm)

    def policy_for(self, checkpoint: str | Path):
        """A policy sampling ``checkpoint`` through the configured generation backend; ``[plugins]
        generation = "hf?batch_size=64"`` passes the options after ``?`` on (``hf:CHECKPOINT?batch_size=64``)."""
        backend, _, options = self.config.plugins.generation.partition("?")
        return load_policy(f"{backend}:{checkpoint}" + (f"?{options}" if options else ""), pm=self.pm)
