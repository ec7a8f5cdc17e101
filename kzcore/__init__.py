"""kzcore: a plugin-based harness for training and evaluating LLMs that write GPU kernels.

The public plugin API is what ``__all__`` lists: a plugin imports from ``kzcore`` only (``from kzcore import
hookimpl, Language, KzError``), never from kzcore's modules, so the core can move code between its modules
without breaking plugins (tests/test_public_api.py checks the bundled plugins). Names other than
``hookimpl``, ``PROJECT`` and ``__version__`` load on first use, so importing kzcore stays cheap.
"""

import importlib

import pluggy

__version__ = "0.1.0"

PROJECT = "kzcore"
hookimpl = pluggy.HookimplMarker(PROJECT)

# name -> the module that defines it (loaded lazily, PEP 562)
_PUBLIC = {
    # values that cross hook boundaries
    **dict.fromkeys(
        (
            "Candidate",
            "Command",
            "EvalConfig",
            "EvalJob",
            "EvalResult",
            "LaunchCounter",
            "OutputCheck",
            "Phase",
            "Problem",
            "ProblemCheckJob",
            "ProblemReport",
            "PromptSection",
            "Status",
            "Timing",
        ),
        "kzcore.types",
    ),  # fmt: skip
    "Language": "kzcore.language",  # what a language plugin registers (subclassed)
    **dict.fromkeys(("KzError", "CompileError", "ProblemFormatError"), "kzcore.errors"),
    # policy backends
    **dict.fromkeys(("Policy", "PolicyError", "Chat", "Completion", "SamplingParams", "load_policy"), "kzcore.policy"),
    **dict.fromkeys(("DTYPES", "model_dtype"), "kzcore.train.precision"),  # the dtype a policy loads its model in
    # language plugins: loading candidate files, the static checks' shared rules, the runtime guard, prompts
    "import_module_from_file": "kzcore.language",
    **dict.fromkeys(
        (
            "FORBIDDEN_ATTRS",
            "FORBIDDEN_IMPORTS",
            "KERNEL_IMPORTS",
            "METHOD_COMPUTE",
            "ModuleInfo",
            "ast_walk",
            "common_violations",
            "dotted",
            "escape_violations",
            "forward_violations",
        ),
        "kzcore.evaluate.static",
    ),  # fmt: skip
    "guard": "kzcore.evaluate.guard",  # a module: guard.suspended(), guard.compile_only(), guard.PrecompileAbort
    "one_shot": "kzcore.builtins.prompting",
    "compare_outputs": "kzcore.builtins.outputs",  # the default output check; ``summarise`` for a one-pass kernel
    "code_blocks": "kzcore.builtins.extraction",  # (tag, body) of each fenced block in a completion
    **dict.fromkeys(("cache_dir", "cache_root"), "kzcore.cache"),
    # executor plugins
    **dict.fromkeys(("Executor", "open_executor"), "kzcore.executors"),
    "LocalPool": "kzcore.executors.local",
    "scrub_environment": "kzcore.executors.worker",
    "device_work": "kzcore.executors.devicelock",  # device work outside the stages' locks (start-up, memory given back)
    **dict.fromkeys(("get_plugin_manager", "plugin_specs"), "kzcore.plugins"),
    # the one-call API: one candidate against one problem source (KernelBench's eval_kernel_against_ref)
    "evaluate_source": "kzcore.evaluate.api",
}
_MODULES = {"guard"}  # public names that are modules, not attributes of one

__all__ = ["PROJECT", "__version__", "hookimpl", *sorted(_PUBLIC)]


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'kzcore' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    # not cached in this module's namespace: evaluator workers watch kzcore's modules for attributes that
    # change while a candidate runs (evaluate/integrity.py), and a plugin's lazy import may happen then
    return loaded if name in _MODULES else getattr(loaded, name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
