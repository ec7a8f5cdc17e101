"""kzcore: a plugin-based harness for training and evaluating LLMs that write GPU kernels.

Plugins need one import: ``from kzcore import hookimpl``.
"""

import pluggy

__version__ = "0.1.0"

PROJECT = "kzcore"
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["PROJECT", "__version__", "hookimpl"]
