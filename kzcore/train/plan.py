"""`kz train --dry-run`: what a config would run, without training — the phases, each process's GPU, the
Coder's and the Proposer's batch layout across processes, the evaluator workers, and whether every named
component exists here (plugins, problem sets, models, teacher). Errors a launch would hit after minutes
(a batch layout TRL refuses, an unknown language or executor) are errors here; things that only live on the
target machine (model weights, a KernelBench checkout) are listed as missing, not fatal.

Neighbours: kzcore.train.config (the config), kzcore.train.trainer (what runs), kzcore.executors.local
(``pool_gpus``: one process's evaluator workers stay on its own GPU)."""

from __future__ import annotations

from pathlib import Path

from kzcore.errors import KzError
from kzcore.train.config import COLDSTART_TASKS, TrainConfig
from kzcore.train.schedule import phase_id


def launcher_processes(accelerate_config: str | None, processes: int | None) -> int:
    """The number of training processes: ``processes`` if given, else ``num_processes`` of an accelerate
    config file, else 1."""
    if processes is not None:
        if processes < 1:
            raise KzError(f"--processes must be at least 1, got {processes}")
        return processes
    if accelerate_config is None:
        return 1
    import yaml

    try:
        data = yaml.safe_load(Path(accelerate_config).read_text()) or {}
    except FileNotFoundError:
        raise KzError(f"{accelerate_config}: no such accelerate config") from None
    except yaml.YAMLError as exc:
        raise KzError(f"{accelerate_config}: not valid YAML ({exc})") from None
    n = data.get("num_processes", 1)
    if not isinstance(n, int) or n < 1:
        raise KzError(f"{accelerate_config}: num_processes must be a positive integer, got {n!r}")
    return n


def batch_layout(settings, processes: int, role: str) -> dict:
    """Completions and prompts per optimizer step across ``processes``; TRL needs the global batch to be a
    multiple of the group size (one prompt's ``num_generations`` completions, spread over processes)."""
    total = settings.batch_size * processes
    if total % settings.num_generations:
        raise KzError(
            f"[{role}] batch_size {settings.batch_size} x {processes} process(es) = {total} completions per step, "
            f"not a multiple of num_generations {settings.num_generations}: TRL would refuse it at launch"
        )
    return {
        "completions_per_process": settings.batch_size,
        "completions_per_step": total,
        "prompts_per_step": total // settings.num_generations,
        "group_size": settings.num_generations,
        "max_completion_length": settings.max_completion_length,
        "generation": f"vLLM ({settings.vllm_mode})" if settings.use_vllm else "transformers generate",
        # what TRL divides a group's advantages (reward - group mean) by: "none", the batch's or the group's std
        "scale_rewards": settings.scale_rewards,
    }


def _with_decoders(layout: dict, pm) -> dict:
    """The layout's generation line naming the plugins whose ``kz_fast_generate`` may stand in for
    transformers' ``generate`` (each decides per model and device when GRPO starts)."""
    if layout["generation"] != "transformers generate":
        return layout
    plugins = sorted({impl.plugin_name for impl in pm.hook.kz_fast_generate.get_hookimpls()})
    if plugins:
        by = f"plugin{'s' if len(plugins) > 1 else ''} {', '.join(plugins)}"
        layout = {**layout, "generation": f"transformers generate, or kz_fast_generate from {by}"}
    return layout


def _model(spec: str, pm) -> dict:
    from kzcore.plugins import policies
    from kzcore.policy import parse_policy_spec

    if Path(spec).is_dir():
        return {"spec": spec, "kind": "checkpoint directory", "here": True}
    name, arg = parse_policy_spec(spec)
    if name not in policies(pm).items:
        if spec.startswith("/") or spec.startswith("."):
            return {"spec": spec, "kind": "checkpoint directory", "here": False}
        installed = ", ".join(sorted(policies(pm).items))
        raise KzError(f"model {spec!r}: neither a directory nor a policy (installed policies: {installed})")
    here = not arg or not arg.startswith("/") or Path(arg.split("?")[0]).exists()
    return {"spec": spec, "kind": f"policy {name}", "here": here}


def _problems(specs, pm) -> dict:
    from kzcore.problems import load_problems

    out = {}
    for spec in specs:
        try:
            out[spec] = len(load_problems(spec, pm=pm))
        except KzError as exc:
            out[spec] = f"missing here ({exc})"
    return out


def training_plan(config: TrainConfig, processes: int = 1, pm=None) -> dict:
    """Everything `kz train` would set up for ``config`` on ``processes`` training processes (one GPU each)."""
    from kzcore.plugins import executors, get_plugin_manager, policies, require_language

    pm = pm or get_plugin_manager()
    for language in config.plugins.languages:
        require_language(language, pm)
    executors(pm).get(config.plugins.executor)
    policies(pm).get(config.plugins.generation.partition("?")[0])  # held-out sampling goes through a policy
    teacher_kind = config.distill.teacher.partition(":")[0]
    plan: dict = {
        "processes": processes,
        "phases": [
            {"id": phase_id(p), "role": p.role, "steps": p.steps, **({"frozen": True} if p.frozen else {})}
            for p in config.schedule.phases()
        ],
        "models": {
            "coder": _model(config.models.coder, pm),
            "proposer": "same as the Coder" if config.models.proposer == "same" else _model(config.models.proposer, pm),
        },
        "teacher": (
            {"spec": config.distill.teacher, "kind": "a suite's solutions"}
            if teacher_kind == "solutions"
            else _model(config.distill.teacher, pm)
        ),
        "languages": list(config.plugins.languages),
        "coder_batch": _with_decoders(batch_layout(config.coder, processes, "coder"), pm),
        "coder_method": coder_method(config, processes),
        "proposer_batch": _with_decoders(batch_layout(config.proposer_grpo, processes, "proposer_grpo"), pm),
        "evaluator": _evaluator(config, processes),
        "problems": {
            "coldstart": _problems([config.problems.coldstart], pm),
            "tasks": (
                {"coldstart": "the cold start's verified problems (known after the distill phase)"}
                if config.problems.tasks == COLDSTART_TASKS
                else _problems([config.problems.tasks], pm)
            ),
            "heldout": _problems(config.problems.heldout, pm),
        },
        "heldout_names": list(config.problems.heldout_names),
        "heldout": {
            "n": config.heldout.n,
            "k": config.heldout.ks(),
            "k_above_n": [k for k in config.heldout.k if k > config.heldout.n],
            "base": config.heldout.base,
            "probe": config.heldout.probe,
            "phases": config.heldout.phases,
            "validation": config.heldout.validation,
        },
        "decontaminate": _decontamination(config, pm),
        "proposer_cold_start_steps": config.proposer.cold_start_steps,
        "proposer_unseen_weight": config.proposer.unseen_weight,
        # the Proposer's cold-start modules beyond the cold start's problems (kz compose), and their count here
        "proposer_cold_start_modules": _cold_start_modules(config, pm),
        # a departure from the method: gate failures graded by the stage reached ([] = the method's gate_penalty)
        "proposer_graded_gate_reward": list(config.proposer.gate_grades),
        "proposer_gate_penalty": config.proposer.gate_penalty,
        "proposer_examples": config.proposer.examples,
        "calibrate": config.task_mix.calibrate,
        "distill_extra": {"variants": config.distill.variants, "chains": config.distill.chains},
        "task_mix": {"older": config.task_mix.older, "builtin": config.task_mix.builtin},
        "warnings": (
            [
                "distillation, the Proposer's gates and held-out evaluation are not rank-aware yet: every process "
                "runs them (only the GRPO steps and their CA-GRPO groups are shared across processes)"
            ]
            if processes > 1
            else []
        )
        + (
            ['[coder] method = "rft" samples the draw in every process into the same files (not rank-aware)']
            if processes > 1 and config.coder.method == "rft"
            else []
        ),
    }
    return plan


def coder_method(config: TrainConfig, processes: int) -> dict:
    """``[coder] method`` and what a Coder phase trains by it: the optimizer steps and sequences per step
    every method shares; for the controls without RL (kzcore.train.controls) their SFT's micro-batch and
    accumulation, and for "rft" the tasks sampled and the samples of each."""
    from kzcore.train.controls import control_settings

    coder, steps = config.coder, config.schedule.coder_steps
    out: dict = {"method": coder.method, "steps": steps, "sequences_per_step": coder.batch_size * processes}
    if coder.method != "ca-grpo":
        sft = control_settings(config.sft, coder, steps)
        out.update(micro_batch=sft.batch_size, grad_accum=sft.grad_accum, learning_rate=sft.learning_rate)
    if coder.method == "rft":
        out.update(
            tasks=steps * max(1, coder.batch_size // coder.num_generations), samples_per_task=coder.num_generations
        )
    return out


def _cold_start_modules(config: TrainConfig, pm) -> dict:
    """``[proposer] cold_start_modules``: spec -> count; "compose" is made when the run starts (its count then)."""
    spec = config.proposer.cold_start_modules
    if not spec:
        return {}
    if spec == "compose":
        return {"compose": "the composer's modules, made and decontaminated when the run starts (RUN/composed.jsonl)"}
    return _problems([spec], pm)


def _decontamination(config: TrainConfig, pm) -> dict:
    """``[heldout] decontaminate``: the mode and, unless "off", the counts of kzcore.decontam's report on the
    problems named here (the Proposer's modules are judged during the run), the training problems "drop-train"
    would leave out, or why the report cannot be made here (a problem set missing)."""
    mode = config.heldout.decontaminate
    if mode == "off":
        return {"mode": mode}
    from kzcore.decontam import decontaminate, label
    from kzcore.problems import load_problems
    from kzcore.train.tasks import heldout_problems, training_problems

    try:
        heldout = heldout_problems(config, pm)
        held = {(p.level, p.name) for p in heldout} if config.problems.exclude_heldout else set()
        coldstart = [p for p in load_problems(config.problems.coldstart, pm=pm) if (p.level, p.name) not in held]
        report = decontaminate(training_problems(config, coldstart, heldout, pm), heldout)
    except KzError as exc:
        return {"mode": mode, "missing": str(exc)}
    out = {"mode": mode, **report.counts()}
    if mode == "drop-train":
        out["dropped_train"] = sorted(label(p) for p in report.near_train)
    return out


def _evaluator(config: TrainConfig, processes: int) -> dict:
    per_gpu = config.eval.workers_per_gpu
    workers = config.plugins.workers
    if processes > 1:
        n = workers or per_gpu
        where = f"{n} worker(s) per process, on that process's own GPU (LOCAL_RANK)"
    else:
        n = workers
        where = f"{workers} worker(s) over every visible GPU" if workers else f"{per_gpu} worker(s) on each GPU"
    return {
        "executor": config.plugins.executor,
        "workers": n,
        "placement": where,
        "total": (n or 0) * processes or None,
    }


SCALE_WORDS = {
    "none": "advantages = reward - group mean (scale_rewards none)",
    "batch": "advantages = (reward - group mean) / batch std (scale_rewards batch)",
    "group": "advantages = (reward - group mean) / group std (scale_rewards group)",
}


def format_plan(plan: dict) -> list[str]:
    """The plan as lines for a terminal."""
    lines = [f"processes: {plan['processes']} (one GPU each)"]
    lines.append(
        "phases: "
        + ", ".join(
            p["id"]
            + (
                " (frozen: proposes, does not train)"
                if p.get("frozen")
                else f" ({p['steps']} steps)"
                if p["steps"]
                else ""
            )
            for p in plan["phases"]
        )
    )
    for role, model in plan["models"].items():
        lines.append(f"{role}: {_describe(model)}")
    lines.append(f"teacher: {_describe(plan['teacher'])}")
    lines.append(f"languages: {', '.join(plan['languages'])}")
    for key, label in (("coder_batch", "Coder"), ("proposer_batch", "Proposer")):
        b = plan[key]
        lines.append(
            f"{label} step: {b['prompts_per_step']} prompt(s) x {b['group_size']} = {b['completions_per_step']} completions "
            f"({b['completions_per_process']} per process, groups gathered across processes), "
            f"<= {b['max_completion_length']} tokens, {b['generation']}; {SCALE_WORDS[b['scale_rewards']]}"
        )
    lines.append(_method_line(plan["coder_method"]))
    e = plan["evaluator"]
    lines.append(f"evaluator: {e['executor']}, {e['placement']}")
    for kind, sets in plan["problems"].items():
        for spec, count in sets.items():
            lines.append(f"{kind} problems {spec}: {count}")
    if plan["heldout_names"]:
        lines.append(f"held-out problems kept (heldout_names): {', '.join(plan['heldout_names'])}")
    h = plan["heldout"]
    lines.append(
        f"held-out: n = {h['n']}, pass@k for k in {h['k']}"
        + (f" (not {h['k_above_n']}: above n)" if h["k_above_n"] else "")
        + ", after "
        + ("the base model, " if h["base"] else "")
        + {"every": "SFT and every Coder phase", "ends": "SFT and the last Coder phase"}.get(
            h["phases"], "the last Coder phase"
        )
        + (f"; {h['validation']} cold-start problems kept out of training (validation)" if h["validation"] else "")
        + (f"; with {h['probe']} fixed training problems (the probe)" if h["probe"] else "")
    )
    d = plan["decontaminate"]
    if "missing" in d:
        lines.append(f"decontamination ({d['mode']}): not computed here ({d['missing']})")
    elif d["mode"] != "off":
        lines.append(
            f"decontamination ({d['mode']}): {d['contaminated']} of {d['heldout']} held-out problems near-duplicate "
            f"one of {d['train']} training problems, {d['clean']} clean (held-out scores also on the clean ones)"
            + (f"; {len(d['dropped_train'])} training problems left out" if d["mode"] == "drop-train" else "")
        )
    extra = plan["distill_extra"]
    if extra["variants"] or extra["chains"]:
        lines.append(
            f"distillation adds at most {extra['variants']} verified variants of the cold-start problems and "
            f"{extra['chains']} chains of two elementwise ops"
        )
    mix = plan["task_mix"]
    newest = max(0.0, 1.0 - mix["older"] - mix["builtin"])
    lines.append(
        f"Coder tasks per phase: {newest:.0%} from the Proposer's newest accepted batch, {mix['older']:.0%} from "
        f"earlier rounds' accepted modules, {mix['builtin']:.0%} from [problems] tasks (an empty source's share "
        "goes to the first non-empty of newest, older, tasks)"
    )
    if plan["calibrate"]:
        lines.append(f"Coder tasks calibrated before the first Coder phase: {plan['calibrate']} samples of each")
    if plan["proposer_cold_start_steps"]:
        lines.append(
            f"Proposer cold start: {plan['proposer_cold_start_steps']} SFT steps on the cold start's modules, in the SFT phase"
        )
    for spec, count in plan["proposer_cold_start_modules"].items():
        lines.append(f"Proposer cold-start modules {spec}: {count}")
    lines.append(
        "Proposer prompt examples: "
        + (
            "a cold-start module for each requested API, then the suite's (per-api)"
            if plan["proposer_examples"] == "per-api"
            else "two modules of the built-in suite (suite, the method's)"
        )
    )
    if plan["proposer_graded_gate_reward"]:
        grades = ", ".join(f"{g:g}" for g in plan["proposer_graded_gate_reward"])
        lines.append(
            f"Proposer gate failures graded by the stage reached ({grades}), not the method's gate_penalty "
            f"{plan['proposer_gate_penalty']:g}"
        )
    if plan["proposer_unseen_weight"] != 1.0:
        lines.append(
            f"Proposer API sets: an API no example, cold-start or task module uses is drawn "
            f"{plan['proposer_unseen_weight']:g} as often (the curriculum widens as modules are accepted)"
        )
    lines += [f"warning: {w}" for w in plan["warnings"]]
    return lines


def _method_line(m: dict) -> str:
    """The Coder method's line: what trains the Coder in each Coder phase, and the compute it matches."""
    steps = f"{m['steps']} steps x {m['sequences_per_step']} sequences"
    if m["method"] == "ca-grpo":
        return f"Coder method: ca-grpo (GRPO with CA-GRPO rewards), {steps} a phase"
    sft = f"micro-batches of {m['micro_batch']} x {m['grad_accum']} accumulated, learning rate {m['learning_rate']:g}"
    if m["method"] == "sft":
        return f"Coder method: sft (a control, no RL): SFT continued on the cold start's distilled set, {steps} a phase ({sft})"
    return (
        f"Coder method: rft (a control, no RL): {m['tasks']} tasks drawn as for CA-GRPO x {m['samples_per_task']} "
        f"samples from the Coder, the correct ones fine-tuned on, {steps} a phase ({sft})"
    )


def _describe(model) -> str:
    if isinstance(model, str):
        return model
    return f"{model['spec']} ({model['kind']}{'' if model.get('here', True) else ', missing here'})"
