"""The output check a candidate's outputs face, written once: ``kz_check_outputs`` (elementwise, by whichever
plugin answers) and then the core's own relative-error check (`magnitude`). The correctness trials
(`trials.compare`) call it, and so does the problem check (`problem_check`), which asks it whether a
trivial output would pass (`degeneracy`): a problem is judged by the checker its candidates meet."""

from __future__ import annotations

from kzcore.evaluate import magnitude
from kzcore.types import EvalConfig, OutputCheck


def check_outputs(pm, expected: list, actual: list, config: EvalConfig, base: EvalConfig | None = None) -> OutputCheck:
    """The verdict on ``actual`` against ``expected``. ``config`` sets the elementwise tolerance; ``base`` (default
    ``config``) the relative-error bound, which a varied trial's scaled ``atol`` does not loosen."""
    check = pm.hook.kz_check_outputs(expected=expected, actual=actual, config=config)
    if check.ok:  # the core's own check, whichever plugin compared elementwise
        check = magnitude.check_relative_error(expected, actual, base or config, check)
    return check
