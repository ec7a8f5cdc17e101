"""`kz`: the command line. Thin: parse arguments, call the library, print. Errors the user can fix end as
one line on stderr and a non-zero exit; results already filed are never lost."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

from kzcore.errors import KzError

EXIT_USAGE, EXIT_INTERRUPTED = 2, 130


def _cmd_plugins(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from kzcore.plugins import commands, executors, get_plugin_manager, languages, policies, suites

    pm = get_plugin_manager()
    registries = [languages(pm), executors(pm), policies(pm), suites(pm), commands(pm)]
    table = Table(title="kzcore plugins")
    for col in ("plugin", "hooks", "registers"):
        table.add_column(col)
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        regs = [f"{r.kind} {item}" for r in registries for item, owner in r.owners.items() if owner == name]
        table.add_row(name, ", ".join(hooks), ", ".join(regs))
    Console().print(table)
    return 0


def _load_problems(spec: str, kernelbench: str | None = None):
    """``load_problems``, with a one-line error naming a suite's levels when ``spec`` asks for one it lacks.
    ``kernelbench``: the KernelBench checkout for ``kernelbench[:levels]`` (--kernelbench)."""
    from kzcore.plugins import suites
    from kzcore.problems import KERNELBENCH, KERNELBENCH_LEVELS, load_problems, parse_suite_spec

    if not Path(spec).exists():
        name, levels = parse_suite_spec(spec)
        if levels and (name in suites().items or name == KERNELBENCH):
            # KernelBench's levels are known without a checkout: the error comes before asking for one
            have = set(KERNELBENCH_LEVELS) if name not in suites().items else {p.level for p in load_problems(name)}
            if missing := sorted(levels - have):
                raise KzError(
                    f"suite {name!r} has no level {', '.join(map(str, missing))}; "
                    f"its levels: {', '.join(map(str, sorted(have)))}"
                )
    return load_problems(spec, kernelbench=kernelbench)


def _size_profiles(source: str) -> list[str]:
    """The size profiles the evaluator can run ``source`` at, read without importing it: "full", the keys of
    its literal ``KZ_SIZES`` dict, then "small" and "alt" where it lacks them and `sizes.derive_profile` derives
    them (as `sizes.apply_profile` would; named with the `sizes.DERIVED` suffix)."""
    import ast

    from kzcore.evaluate.sizes import DERIVED, derive_profile

    profiles = ["full"]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return profiles
    own: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KZ_SIZES" for t in node.targets):
            if isinstance(node.value, ast.Dict):
                keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
                try:
                    values = ast.literal_eval(node.value)
                except ValueError:
                    values = {}
                own = {k: values.get(k) if isinstance(values, dict) else None for k in keys}
    profiles += list(own)
    small = own.get("small") if isinstance(own.get("small"), dict) else None
    for profile in ("small", "alt"):
        if profile not in own and derive_profile(source, profile, base=small)[0]:
            profiles.append(profile + DERIVED)
    return profiles


def _cmd_suite(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from kzcore.plugins import suites

    console = Console()
    if args.suite_cmd == "list":
        table = Table(title="problem suites")
        for col in ("suite", "path", "problems"):
            table.add_column(col)
        from kzcore.problems import load_problem_dir

        for name, path in sorted(suites().items.items()):
            problems = load_problem_dir(Path(path), suite=name)
            by_level = {}
            for p in problems:
                by_level[p.level] = by_level.get(p.level, 0) + 1
            table.add_row(name, str(path), ", ".join(f"level{lvl}: {n}" for lvl, n in sorted(by_level.items())))
        console.print(table)
        return 0
    problems = _load_problems(args.spec, args.kernelbench)
    if args.suite_cmd == "check":
        return _suite_check(_only(problems, args.only, args.spec), args, console)
    if args.name:
        matches = [p for p in problems if p.name == args.name or p.key == args.name]
        if not matches:
            raise KzError(f"no problem {args.name!r} in {args.spec}")
        sys.stdout.write(matches[0].source)  # verbatim: `kz suite show builtin NAME > file.py` must round-trip
        return 0
    table = Table(title=args.spec)
    for col in ("level", "problem", "size profiles"):
        table.add_column(col)
    for p in problems:
        table.add_row(str(p.level), p.name, ", ".join(_size_profiles(p.source)))
    console.print(table)
    return 0


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


def _suite_check(problems, args, console) -> int:
    from rich.table import Table

    from kzcore.evaluate.problem_check import DEVICE_BUDGET, check_problems

    config = _config_from(args)
    budget = int(args.max_memory * 2**30) if args.max_memory else DEVICE_BUDGET
    args.saved = "nothing was saved (kz suite check prints its table once every problem is checked)"
    reports = check_problems(problems, config, workers=args.workers, max_bytes=budget)
    if args.out:
        import json

        from kzcore.types import to_json

        rows = [json.dumps({**to_json(r), "key": r.key, "ok": r.ok}) + "\n" for r in reports]
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("".join(rows))
    table = Table(title=f"problem checks: {args.spec}")
    for col in ("problem", "runs", "deterministic", "finite", "non-degenerate", "reason"):
        table.add_column(col)
    mark = {True: "yes", False: "[red]no[/red]"}
    for r in reports:
        ran = r.ok_runs
        table.add_row(
            r.key,
            mark[ran],
            mark[r.deterministic] if ran else "—",
            mark[r.finite] if r.deterministic else "—",
            mark[not r.degenerate] if r.finite else "—",
            r.reason,
        )
    if not console.is_terminal:
        console = type(console)(width=200)
    console.print(table)
    bad = sum(not r.ok for r in reports)
    console.print(f"{len(reports) - bad} of {len(reports)} problems pass every check")
    return 0


def _config_from(args):
    """The EvalConfig of the evaluator options a command declared (`_add_eval_args`); the fields it has no
    option for keep EvalConfig's defaults."""
    from kzcore.types import EvalConfig

    values = {}
    for field in _eval_fields(args.eval_fields):
        _, options, negated = _eval_option(field)
        value = getattr(args, options["dest"])
        values[field.name] = not value if negated else value
    return EvalConfig(**values)


def _cmd_eval(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kzcore.evaluate.runner import evaluate
    from kzcore.plugins import require_language
    from kzcore.problems import load_solutions

    console = Console(stderr=True)
    if bool(args.solutions) == bool(args.policy):  # sampling a whole suite must never start by default
        raise UsageError(
            "kz eval needs --solutions (candidates to evaluate) or --policy (a model to sample them from)"
            if not args.solutions
            else "kz eval takes --solutions or --policy, not both"
        )
    config = _config_from(args)
    _note_gpu_only(require_language(args.language), config.device, console)
    problems = _only(_load_problems(args.problems, args.kernelbench), args.only, args.problems)
    if args.solutions:
        candidates = load_solutions(args.solutions, problems, args.language)
    else:
        completions = Path(args.completions or Path(args.out).with_suffix(".completions.jsonl"))
        args.saved = f"completions so far are in {completions}; run the same command again to resume"
        candidates = _sample(args, problems, completions, console)
        console.print(f"completions: {completions}")
    covered = {(c.level, c.problem) for c in candidates}
    missing = [p.key for p in problems if (p.level, p.name) not in covered]
    if missing:
        console.print(
            f"[yellow]{len(missing)} problem(s) have no candidate and score 0:[/yellow] {_first(missing)}",
            soft_wrap=True,
        )
    if not candidates:
        raise KzError(f"no candidates found in {args.solutions or 'the policy output'} for {len(problems)} problem(s)")
    out = Path(args.out)
    progress = Progress(
        TextColumn("[bold]evaluating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
    )
    task = None

    def on_start(already: int, todo: int):
        nonlocal task
        if already:
            console.print(f"{already} result(s) already in {out}; evaluating the remaining {todo}")
        task = progress.add_task("", total=todo)

    def on_result(result):
        progress.update(task, advance=1, description=f"{result.problem}: {result.status.value}")

    args.saved = f"results so far are in {out}; run the same command again to resume"
    with progress:
        results = evaluate(
            problems,
            candidates,
            config,
            out,
            executor=args.executor,
            workers=args.workers,
            on_result=on_result,
            on_start=on_start,
            on_stale=_report_retracted(out, console),
        )
    k = min([args.k] + [sum(1 for c in candidates if (c.level, c.problem) == key) for key in covered])
    _print_scores(results, max(1, k), [(p.level, p.name) for p in problems], args.include_degenerate, Console())
    Console().print(f"results: {out}")
    return 0


def _first(names: list[str], limit: int = 10) -> str:
    """``names`` joined with commas, the first ``limit`` of them and how many more."""
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f", … and {more} more" if more > 0 else "")


def _report_retracted(out: Path, console):
    """What `kz eval` says when the runner retracted saved results whose code changed since."""

    def on_stale(stale) -> None:
        changed = [r.key for r in stale if r.code_hash]
        unknown = len(stale) - len(changed)
        if changed:
            console.print(
                f"{len(changed)} candidate(s) changed since their result in {out} was saved (their code or their "
                f"problem's source); evaluating them again: {_first(changed)}",
                soft_wrap=True,
            )
        if unknown:
            console.print(
                f"{unknown} result(s) in {out} do not say which code they judged (an older kz); evaluating them again",
                soft_wrap=True,
            )

    return on_stale


def _note_gpu_only(language, device: str, console) -> None:
    """A ``needs_gpu`` language evaluated on a CPU: its candidates are checked and compiled, and none can
    run, which the user should hear before the results say it candidate by candidate."""
    from kzcore.executors.devices import resolve_device

    if language.needs_gpu and device != "cuda" and resolve_device(device) == "cpu":
        console.print(
            f"[yellow]note: {language.name} candidates need a GPU; on this CPU they are checked and compiled, "
            "and every one that gets as far as running is a runtime_error[/yellow]"
        )


def _sampling_params(args):
    from kzcore.policy import SamplingParams

    return SamplingParams(
        n=args.n, temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed
    )


def _sample(args, problems, out: Path, console):
    """Sample ``args.n`` completions per problem from ``args.policy`` into ``out``; returns the candidates."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kzcore.policy import load_policy
    from kzcore.sampling import sample_candidates

    policy = load_policy(args.policy)
    progress = Progress(
        TextColumn(f"[bold]sampling {args.policy}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    try:
        with progress:
            task = progress.add_task("", total=len(problems))
            return sample_candidates(
                policy, problems, args.language, _sampling_params(args), out, template=args.template,
                batch_size=args.batch_size, on_batch=lambda k: progress.update(task, advance=k),
            )  # fmt: skip
    finally:
        policy.close()


def _cmd_sample(args) -> int:
    from rich.console import Console

    from kzcore.plugins import require_language

    require_language(args.language)
    problems = _only(_load_problems(args.problems, args.kernelbench), args.only, args.problems)
    console = Console(stderr=True)
    args.saved = f"completions so far are in {args.out}; run the same command again to resume"
    candidates = _sample(args, problems, Path(args.out), console)
    Console().print(f"{len(candidates)} completions for {len(problems)} problems in {args.out}")
    return 0


def _cmd_serve(args) -> int:
    import os

    from kzcore.serve import serve

    serve(args.policy, args.host, args.port, model_name=args.model_name, api_key=os.environ.get("KZ_SERVE_API_KEY"))
    return 0


def _cmd_distill(args) -> int:
    from rich.console import Console

    from kzcore.plugins import require_language
    from kzcore.train.distill import distill

    args.language = args.language or ["triton"]
    for language in args.language:
        require_language(language)
    problems = _load_problems(args.problems, args.kernelbench)
    args.saved = f"teacher samples and results so far are in {args.out}; run the same command again to resume"
    kind, _, arg = args.teacher.partition(":")
    teacher = None
    if kind != "solutions":
        from kzcore.policy import load_policy

        teacher = load_policy(args.teacher)
    try:
        summary = distill(
            problems, args.language, Path(args.out), _config_from(args), teacher=teacher,
            solutions=arg if kind == "solutions" else None, k=args.k, only_faster=args.only_faster,
            template=args.template, workers=args.workers,
        )  # fmt: skip
    finally:
        if teacher is not None:
            teacher.close()
    console = Console()
    console.print(
        f"{summary.candidates} candidates, {summary.correct} correct, {summary.kept} kept -> {summary.dataset}"
    )
    if summary.note:
        console.print(f"[yellow]{summary.note}[/yellow]")
    return 0


def _cmd_sft(args) -> int:
    from kzcore.train.sft import SFTSettings, run_sft
    from kzcore.train.trl_run import InterruptNote, save_cadence

    settings = SFTSettings(
        max_steps=args.max_steps, learning_rate=args.lr, batch_size=args.batch_size, max_length=args.max_length,
        use_cpu=args.cpu, report_to=tuple(args.report_to), save_steps=args.save_steps, save_minutes=args.save_minutes,
    )  # fmt: skip
    args.saved = InterruptNote(
        lambda: [("SFT", Path(args.out))], "run the same command again to resume",
        f"nothing was saved (kz sft saves its state to {args.out} {save_cadence(args.save_steps, args.save_minutes)})",
    )  # fmt: skip
    metrics = run_sft(args.model, Path(args.data), Path(args.out), settings, quiet=args.quiet)
    print(json.dumps(metrics))
    return 0


def _cmd_train(args) -> int:
    from kzcore.train.config import check_device, load_config
    from kzcore.train.schedule import phases_until

    config = load_config(Path(args.config))  # types checked here and the device below: before any phase runs
    if args.dry_run:
        from kzcore.train.plan import format_plan, launcher_processes, training_plan

        plan = training_plan(config, launcher_processes(args.accelerate_config, args.processes))
        print("\n".join(format_plan(plan)))
        return 0
    if args.processes is not None or args.accelerate_config is not None:
        raise UsageError("--processes and --accelerate-config only go with --dry-run (launch with accelerate launch)")
    roles = None if args.until is None else {p.role for p in phases_until(config.schedule, args.until)}
    check_device(config, roles=roles)
    if args.run_dir:
        import attrs

        config = attrs.evolve(config, run=attrs.evolve(config.run, dir=args.run_dir))
    from kzcore.train.trainer import Trainer

    trainer = Trainer(config)
    from kzcore.train.trl_run import InterruptNote, unfinished_phase_dirs

    resume = f"finished phases are recorded in {config.run.dir}; run the same command again to resume"
    args.saved = InterruptNote(lambda: unfinished_phase_dirs(Path(config.run.dir)), resume, resume)
    state = trainer.run(until=args.until)
    run_dir = Path(config.run.dir)
    print(f"phases done: {', '.join(state['done'])}")
    print(f"logs: {run_dir / 'state.json'} and {run_dir / 'phases'}/*/")
    print(f"checkpoints: {run_dir / 'phases'}/*/model")
    print(f"plots: {run_dir / 'curves.png'}")
    return 0


def _cmd_decontam(args) -> int:
    from kzcore.decontam import decontaminate, format_report, label, load_training

    def load(specs, loader) -> list:
        problems: dict[str, object] = {}
        for spec in specs:
            try:
                found = loader(spec)
            except (OSError, UnicodeDecodeError) as exc:  # a file that exists but cannot be read
                where = getattr(exc, "filename", None) or spec
                raise KzError(f"{where}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
            for p in found:
                problems.setdefault(label(p), p)  # a problem named by two specs is compared once
        return list(problems.values())

    train = load(args.train, lambda spec: load_training(spec, kernelbench=args.kernelbench, load=_load_problems))
    heldout = load(args.heldout, lambda spec: _load_problems(spec, args.kernelbench))
    report = decontaminate(train, heldout)
    print("\n".join(format_report(report, args.worst)))
    if args.out:
        out = Path(args.out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"train": args.train, "heldout": args.heldout, **report.to_json()}, indent=1))
        except OSError as exc:
            raise KzError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
        print(f"report: {out}")
    return 0


def _cmd_propose(args) -> int:
    import functools

    from rich.console import Console

    from kzcore.evaluate.problem_check import check_problems
    from kzcore.policy import SamplingParams, load_policy
    from kzcore.proposer.catalog import load_catalog
    from kzcore.proposer.propose import propose
    from kzcore.proposer.sampler import SamplerConfig

    catalog = load_catalog(*args.catalog)
    policy = load_policy(args.policy)
    console = Console()
    args.saved = f"modules so far are in {args.out}"
    try:
        summary = propose(
            policy, args.n, catalog=catalog, pool_path=args.out,
            check_problems=functools.partial(check_problems, workers=args.workers),
            config=_config_from(args), seed=args.seed, round=args.round,
            sampler=SamplerConfig(min_size=args.min_apis, max_size=args.max_apis),
            params=SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens),
            batch_size=args.batch_size,
            progress=lambda r: console.print(f"{r.id} {'+'.join(r.apis)}: {r.failed_gate or 'accepted'}"),
        )  # fmt: skip
    finally:
        policy.close()
    console.print(f"{summary.accepted} of {summary.attempted} modules accepted -> {summary.pool_path}")
    if summary.failures:
        console.print("gate failures: " + ", ".join(f"{g} {n}" for g, n in summary.failures.items()))
    return 0


def _cmd_compose(args) -> int:
    import os

    from kzcore.jsonl import write_text_atomic
    from kzcore.problems import KERNELBENCH_ENV
    from kzcore.proposer.catalog import load_catalog
    from kzcore.proposer.composer import compose

    catalog = load_catalog(*args.catalog)
    apis = [a.strip() for a in args.apis.split(",") if a.strip()] if args.apis else None
    shipped = str(KERNELBENCH_DATA) if KERNELBENCH_DATA.is_dir() else None  # this checkout's copy
    kernelbench = args.kernelbench or os.environ.get(KERNELBENCH_ENV) or shipped
    heldout = [p for spec in args.heldout for p in _load_problems(spec, kernelbench)]
    result = compose(catalog, per_api=args.per_api, seed=args.seed, apis=apis, heldout=heldout)
    out = Path(args.out)
    write_text_atomic(out, "".join(json.dumps(m.to_json()) + "\n" for m in result.modules))
    table = {"heldout": list(args.heldout), "seed": args.seed, **result.coverage_table(catalog)}
    coverage = out.with_name(out.stem + ".coverage.json")
    write_text_atomic(coverage, json.dumps(table, indent=1) + "\n")
    print(
        f"{table['modules']} verified modules covering {table['covered']} of {table['catalog_apis']} catalog APIs "
        f"-> {out} (coverage table: {coverage})"
    )
    print(
        f"{result.candidates} candidates; dropped at a gate: {result.failures or 'none'}; empty slots: {result.missing}"
    )
    if result.decontaminated is None:
        print("no decontamination: --heldout named no held-out problems")
    else:
        print(
            f"{result.decontaminated} candidates dropped as near duplicates of {' '.join(args.heldout)} (kzcore.decontam)"
        )
    if table["uncovered"]:
        print(f"uncovered: {', '.join(table['uncovered'])}")
    if args.sft:
        from kzcore.proposer.prompt import cold_start_rows, load_examples

        rows, counts = cold_start_rows(
            [m.to_problem() for m in result.modules], catalog, load_examples(catalog), args.seed
        )
        write_text_atomic(Path(args.sft), "".join(json.dumps(r) + "\n" for r in rows))
        print(f"Proposer cold-start SFT rows: {counts['rows']} -> {args.sft}")
    return 0 if result.modules else 1


def _cmd_pool(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from kzcore.proposer.pool import pass_rate_histogram, read_pool, stats

    path = Path(args.pool)
    if not path.exists():
        raise KzError(f"{path}: no such pool file")
    records = read_pool(path)
    st = stats(records)
    console = Console()
    console.print(f"{st.total} modules, {st.accepted} accepted, {st.with_pass_rate} with a Coder pass rate")
    table = Table(title="first failed gate")
    table.add_column("gate")
    table.add_column("modules", justify="right")
    for gate, n in st.failures.items():
        table.add_row(gate, str(n))
    console.print(table)
    for reason, n in st.reasons.items():
        console.print(f"  {n:4d}  {reason}")
    png = pass_rate_histogram(records, Path(args.png) if args.png else path.with_suffix(".pass_rates.png"))
    console.print(f"pass-rate histogram: {png}" if png else "no pass-rate histogram: no module has a pass rate yet")
    return 0


def _print_scores(results, k: int, problems, include_degenerate: bool, console) -> None:
    """The score table, without the problems that failed the problem check unless ``include_degenerate``,
    a line saying which were left out (or counted), and for each one left out why and what to do."""
    import attrs

    from kzcore.metrics import degenerate_note
    from kzcore.report import degenerate_lines, print_report

    note = degenerate_note(results, include_degenerate)
    left_out = [] if include_degenerate else degenerate_lines(results)
    if include_degenerate:
        results = [attrs.evolve(r, problem_degenerate="") for r in results]
    print_report(results, k=k, problems=problems, console=console)
    if note:
        console.print(f"[yellow]{note}[/yellow]")
    for line in left_out:  # one line each: why, and what would count it
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)


def _cmd_report(args) -> int:
    from rich.console import Console

    from kzcore.report import report_plots
    from kzcore.results import read_results

    path = Path(args.results)
    if not path.exists():
        raise KzError(f"{path}: no such results file")
    results = read_results(path)  # skipped lines are reported as warnings on stderr (main)
    if not results:
        raise KzError(f"{path}: holds no results")
    console = Console()
    _print_scores(results, args.k, (), args.include_degenerate, console)
    png = report_plots(results, Path(args.plot) if args.plot else path.with_suffix(".plots.png"))
    timed = any(r.correct and r.speedup for r in results)
    console.print(f"plots: {png} (verdicts per level{', speedup histogram' if timed else ''})")
    return 0


DEFAULT_POLICY = "smollm2"


def _add_policy_args(parser, policy_help: str, default: str | None = DEFAULT_POLICY) -> None:
    parser.add_argument("--policy", default=default, metavar="NAME[:ARG]", help=policy_help)
    parser.add_argument("-n", type=int, default=1, help="samples per problem")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature")
    parser.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling: keep this much probability mass")
    parser.add_argument("--max-new-tokens", type=int, default=1024, help="most tokens per completion")
    parser.add_argument("--template", default="kernelbench", help="prompt template: kernelbench | principles")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per generate call")


def _add_only(parser, verb: str, example: str = "") -> None:
    """``--only NAMES``, the same for every command that takes a suite (`_only` reads it)."""
    parser.add_argument(
        "--only", default=None, metavar="NAMES",
        help=f"{verb} only these problems (comma-separated names or level/name keys){example}",
    )  # fmt: skip


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
    metadata (`kzcore.types._setting`). A bool is a switch away from its default: ``--NAME`` turns on one
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


KERNELBENCH_DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "kernelbench"
KERNELBENCH_HELP = "KernelBench checkout for --problems kernelbench[:levels] (default: $KZ_KERNELBENCH)"
INCLUDE_DEGENERATE_HELP = "count problems that failed the problem check (degenerate outputs) in the scores"


def build_parser(pm=None) -> argparse.ArgumentParser:
    """kz's argument parser: the built-in commands, then those plugins register on ``pm``
    (``kz_register_commands``; none when ``pm`` is None)."""
    parser = Parser(prog="kz", description="Evaluate and train LLMs that write GPU kernels.")
    sub = parser.add_subparsers(dest="command", required=True)
    _builtin_commands(sub)
    if pm is not None:
        _plugin_commands(sub, pm)
    return parser


def _plugin_commands(sub, pm) -> None:
    from kzcore.plugins import commands

    registry = commands(pm)
    for name, command in registry.items.items():
        if name in sub.choices:
            raise KzError(
                f"plugin {registry.owners[name]!r} registers command {name!r}, which is a built-in kz command"
            )
        parser = sub.add_parser(name, help=command.help, description=command.help or None)
        if command.configure is not None:
            command.configure(parser)
        parser.set_defaults(func=command.run)


def _builtin_commands(sub) -> None:
    from kzcore.decontam import WORST_PAIRS

    sub.add_parser(
        "plugins", help="list loaded plugins, their hooks and what each registers",
        description="The plugins kz loaded (entry points of the 'kzcore' group and the built-ins), the hooks each "
        "implements, and the kernel languages, executors, policies and suites each registers.",
    ).set_defaults(func=_cmd_plugins)  # fmt: skip

    suite = sub.add_parser(
        "suite", help="list suites or show a suite's problems",
        description="Problem suites: list the registered ones, show a suite's problems (or one problem's "
        "source), or check that each problem runs and gives a usable reference output.",
    )  # fmt: skip
    suite_sub = suite.add_subparsers(dest="suite_cmd", required=True)
    suite_sub.add_parser(
        "list", help="registered suites and their problem counts",
        description="Every registered suite, where its files are, and how many problems each level holds.",
    ).set_defaults(func=_cmd_suite)  # fmt: skip
    show = suite_sub.add_parser(
        "show", help="a suite's problems and size profiles, or one problem's source",
        description="A table of the problems of a suite, a level of one (builtin:1, kernelbench:2) or a path, "
        "with the size profiles each runs at: its own KZ_SIZES profiles, and the small and alt profiles the "
        "evaluator derives from its size constants where it has none (marked derived). With NAME: that "
        "problem's source, verbatim.",
    )  # fmt: skip
    show.add_argument("spec", help="suite name (builtin[:level]) or path")
    show.add_argument("name", nargs="?", help="a problem name: print its source")
    show.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    show.set_defaults(func=_cmd_suite)
    check = suite_sub.add_parser(
        "check", help="run each problem in a worker: runs, deterministic, finite, not degenerate",
        description="Run each problem's reference in a sandboxed evaluator worker and report whether it runs, "
        "gives the same output twice, gives finite outputs, and is not degenerate (outputs a constant "
        "kernel would match). Nothing is written unless --out names a file; a problem failing a check is not "
        "an error.",
    )  # fmt: skip
    check.add_argument("spec", help="suite name (builtin[:level]) or path")
    check.add_argument("--out", default=None, metavar="FILE", help="also write one JSON line per problem's report")
    # a problem check is its own kind of job (the reference alone, run three times): its own timeout
    _add_eval_args(
        check, ("device", "size", "timeout_s"),
        device={"help": "where problems run"}, timeout_s={"default": 120.0, "help": "seconds per problem"},
    )  # fmt: skip
    check.add_argument("--workers", type=int, default=None, help="worker processes (default: one per GPU, or cores/2)")
    check.add_argument(
        "--max-memory", type=float, default=None, metavar="GIB",
        help="memory budget per problem in GiB (default: 0.8 x the device's free memory)",
    )  # fmt: skip
    check.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    _add_only(check, "check", ", e.g. to re-check a few alone")
    check.set_defaults(func=_cmd_suite, name=None)

    ev = sub.add_parser(
        "eval", help="evaluate solutions on problems",
        description="Evaluate candidate kernels on problems: each candidate runs in a sandboxed worker, is "
        "checked against the reference over several trials (and a second shape) and, on a GPU, timed. "
        "Candidates come from --solutions, or are first sampled from a model with --policy. Results are "
        "appended to --out and the same command resumes where it stopped; a score table ends the run.",
    )  # fmt: skip
    ev.add_argument("--problems", required=True, help="builtin[:levels], a directory, a .py file or a .jsonl")
    ev.add_argument("--solutions", default=None, help="a directory, a .jsonl, or a suite name (its own solutions)")
    ev.add_argument("--completions", default=None, help="with --policy: where completions go (default: next to --out)")
    ev.add_argument("--language", default="triton", help="kernel language of the candidates (see kz plugins)")
    ev.add_argument("--out", default="runs/results.jsonl", help="results JSONL (appended; re-running resumes)")
    ev.add_argument("--executor", default="local", help="where candidates run: local, or a plugin's (e.g. ray)")
    ev.add_argument("--workers", type=int, default=None, help="worker processes (default: one per GPU, or cores/2)")
    _add_eval_args(ev)
    ev.add_argument("-k", type=int, default=1, help="k for pass@k / fast_p@k")
    ev.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    ev.add_argument("--include-degenerate", action="store_true", help=INCLUDE_DEGENERATE_HELP)
    _add_only(ev, "evaluate", ", each keeping its level")
    _add_policy_args(
        ev, "sample candidates from this policy first, e.g. smollm2 (instead of --solutions)", default=None
    )
    ev.set_defaults(func=_cmd_eval)

    sa = sub.add_parser(
        "sample", help="sample candidate solutions from a policy into a completions JSONL",
        description="Prompt a policy (a model backend, NAME[:ARG]) with each problem and append its "
        "completions to --out, without evaluating them; the same command resumes, asking only for what is "
        "missing. kz eval --solutions OUT evaluates them later.",
    )  # fmt: skip
    sa.add_argument("--problems", required=True, help="builtin[:levels], a directory, a .py file or a .jsonl")
    sa.add_argument("--language", default="triton", help="kernel language the policy is asked to write")
    sa.add_argument("--out", default="runs/completions.jsonl", help="completions JSONL (appended; resumes)")
    sa.add_argument("--seed", type=int, default=0, help="sampling seed")
    sa.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    _add_only(sa, "sample for", ", each keeping its level")
    _add_policy_args(sa, "the policy backend, NAME[:ARG]")
    sa.set_defaults(func=_cmd_sample)

    di = sub.add_parser(
        "distill", help="cold start: teacher kernels, verified, into an SFT dataset",
        description="The cold start: kernels from a teacher policy (or a suite's reference solutions) are "
        "evaluated, and the correct ones (with --only-faster, the faster ones) become prompt/completion rows "
        "in OUT/sft.jsonl for kz sft. Teacher samples and results are kept in --out; the same command resumes.",
    )  # fmt: skip
    di.add_argument("--teacher", required=True, help="a policy spec, or solutions:SUITE for a suite's references")
    di.add_argument("--problems", required=True, help="builtin[:levels], a directory, a .py file or a .jsonl")
    di.add_argument("--language", action="append", default=None, help="repeatable (default: triton)")
    di.add_argument("-k", type=int, default=4, help="teacher samples per problem and language")
    di.add_argument("--only-faster", action="store_true", help="keep only kernels faster than eager (GPU)")
    di.add_argument("--template", default="principles", help="prompt template: kernelbench | principles")
    di.add_argument("--out", default="runs/distill", help="output directory (sft.jsonl and the verified kernels)")
    di.add_argument("--workers", type=int, default=None, help="worker processes (default: one per GPU, or cores/2)")
    di.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    _add_eval_args(di)
    di.set_defaults(func=_cmd_distill)

    sf = sub.add_parser(
        "sft", help="fine-tune a checkpoint on a distilled dataset (TRL SFTTrainer)",
        description="Supervised fine-tuning of a local checkpoint on the sft.jsonl of kz distill with TRL's "
        "SFTTrainer (the loss covers the completions only); the model is saved to --out at the end and the "
        "metrics are printed as JSON. Needs the train extra (trl, datasets).",
    )  # fmt: skip
    sf.add_argument("--model", required=True, help="a checkpoint directory")
    sf.add_argument("--data", required=True, help="sft.jsonl from kz distill")
    sf.add_argument("--out", default="runs/sft", help="output directory for the fine-tuned checkpoint")
    sf.add_argument("--max-steps", type=int, default=20, help="optimizer steps")
    sf.add_argument("--lr", type=float, default=2e-5, help="learning rate")
    sf.add_argument("--batch-size", type=int, default=2, help="examples per device per step")
    sf.add_argument("--max-length", type=int, default=4096, help="longest example in tokens (longer are cut)")
    sf.add_argument("--cpu", action="store_true", help="train on the CPU (required on a machine without CUDA)")
    sf.add_argument("--report-to", action="append", default=[], help="e.g. tensorboard")
    sf.add_argument("--save-steps", type=int, default=0, help="save the trainer's state every N steps (0: by time)")
    sf.add_argument(
        "--save-minutes", type=float, default=5.0,
        help="save the trainer's state when this many minutes passed since the last save (0: by steps only); "
        "the same command resumes from the newest save",
    )  # fmt: skip
    sf.add_argument("--quiet", action="store_true", help="one line per step, no progress bars or metric dicts")
    sf.set_defaults(func=_cmd_sft)

    dc = sub.add_parser(
        "decontam", help="held-out problems with a near-duplicate among training problems: clean vs contaminated",
        description="Compare every training problem's reference source with every held-out problem's by one "
        "fixed rule (kzcore.decontam: normalised-token similarity, and the set of torch ops used; "
        "docs/decontamination.md) and split the held-out problems into clean and contaminated. Prints the "
        "counts and the most similar near-duplicate pairs; --out writes them all as JSON.",
    )  # fmt: skip
    dc.add_argument(
        "--train", nargs="+", required=True, metavar="SPEC",
        help="training problems: suites, paths or .jsonl files (a cold start's problems.jsonl), "
        "pool:FILE (a task pool's accepted modules), variants[:SUITE] (the generated variants)",
    )  # fmt: skip
    dc.add_argument(
        "--heldout", nargs="+", required=True, metavar="SPEC", help="held-out problems, e.g. kernelbench:1 kernelbench:2"
    )  # fmt: skip
    dc.add_argument("--out", default=None, metavar="FILE.json", help="also write the report as JSON")
    dc.add_argument("--worst", type=int, default=WORST_PAIRS, metavar="N", help="near-duplicate pairs to print")
    dc.add_argument(
        "--kernelbench", default=None, metavar="PATH",
        help="KernelBench checkout for kernelbench[:levels] specs (default: $KZ_KERNELBENCH)",
    )  # fmt: skip
    dc.set_defaults(func=_cmd_decontam)

    pr = sub.add_parser(
        "propose", help="Proposer: API sets -> modules -> gates -> task pool",
        description="The Proposer: sample sets of PyTorch APIs from the catalog, ask a policy for a problem "
        "module using each, pass every module through the gates (parses, runs in a worker, deterministic, "
        "not degenerate, not a duplicate), and append one record per module, accepted or not, to the task "
        "pool --out, batch by batch.",
    )  # fmt: skip
    pr.add_argument("--policy", default=DEFAULT_POLICY, metavar="NAME[:ARG]", help="the Proposer's policy")
    pr.add_argument("--n", type=int, default=8, help="modules to propose")
    pr.add_argument("--out", default="runs/pool.jsonl", help="task pool JSONL (appended)")
    pr.add_argument("--catalog", action="append", default=[], help="extra catalog JSON files (repeatable)")
    pr.add_argument("--seed", type=int, default=0, help="seed for API sets and sampling")
    pr.add_argument("--round", type=int, default=0, help="round number recorded with each module")
    pr.add_argument("--min-apis", type=int, default=1, help="fewest APIs per sampled set")
    pr.add_argument("--max-apis", type=int, default=4, help="most APIs per sampled set")
    pr.add_argument("--batch-size", type=int, default=8, help="prompts per generate call")
    pr.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    pr.add_argument("--max-new-tokens", type=int, default=768, help="most tokens per module")
    # the Proposer's gates are problem checks too, kept short: most proposed modules are small
    _add_eval_args(
        pr, ("device", "timeout_s"),
        device={"help": "where modules are checked"}, timeout_s={"default": 60.0, "help": "seconds per module check"},
    )  # fmt: skip
    pr.add_argument("--workers", type=int, default=None, help="worker processes (default: one per GPU, or cores/2)")
    pr.set_defaults(func=_cmd_propose)

    co = sub.add_parser(
        "compose", help="verified Proposer cold-start modules composed from the API catalog",
        description="For every API of the catalog, compose KernelBench-format modules from its signature (the "
        "API alone, and chained with one or two other catalog APIs whose shapes fit), keep only those that pass "
        "every Proposer gate (AST gate for their API set, distinct dedup key, runs, deterministic, finite, not "
        "degenerate, on this CPU at their small profile) and are no near duplicate of a --heldout problem "
        "(kzcore.decontam), and write them as a problem JSONL (--problems, [problems] tasks, [proposer] "
        "cold_start_modules) with a coverage table beside it (OUT.coverage.json).",
    )  # fmt: skip
    co.add_argument("--out", default="runs/composed.jsonl", help="problem JSONL to write (replaced)")
    co.add_argument("--per-api", type=int, default=3, help="modules per catalog API")
    co.add_argument("--seed", type=int, default=0, help="seed for partners, families and sizes")
    co.add_argument("--apis", default=None, metavar="A,B", help="only these catalog APIs (default: all)")
    co.add_argument("--catalog", action="append", default=[], help="extra catalog JSON files (repeatable)")
    co.add_argument(
        "--heldout", nargs="*", default=["kernelbench:1", "kernelbench:2"], metavar="SPEC",
        help="held-out problems no module may near-duplicate (none: no decontamination)",
    )  # fmt: skip
    co.add_argument(
        "--kernelbench", default=None, metavar="PATH",
        help="KernelBench checkout for kernelbench specs (default: $KZ_KERNELBENCH, else bench/data/kernelbench)",
    )  # fmt: skip
    co.add_argument("--sft", default=None, metavar="FILE.jsonl", help="also write the Proposer cold-start SFT rows")
    co.set_defaults(func=_cmd_compose)

    po = sub.add_parser(
        "pool", help="task pool tools",
        description="Tools for the task pool that kz propose (and the trainer's Proposer phases) write.",
    )  # fmt: skip
    po_sub = po.add_subparsers(dest="pool_cmd", required=True)
    ps = po_sub.add_parser(
        "stats", help="gate failure counts and a pass-rate histogram PNG",
        description="How many modules of a task pool were accepted, which gate the others failed first (and "
        "why), and a histogram PNG of the Coder pass rates recorded for accepted tasks.",
    )  # fmt: skip
    ps.add_argument("pool", help="task pool JSONL (from kz propose)")
    ps.add_argument("--png", default=None, help="histogram path (default: next to the pool file)")
    ps.set_defaults(func=_cmd_pool)

    tr = sub.add_parser(
        "train", help="the alternating KernelZero trainer from a TOML config",
        description="The KernelZero schedule from a TOML config: a cold start (distillation, then SFT), then "
        "rounds of Proposer phases that grow the task pool and Coder GRPO phases that train on it, scored on "
        "held-out problems. The config is checked before any phase runs; finished phases are recorded in the "
        "run directory, so the same command resumes.",
    )  # fmt: skip
    tr.add_argument("--config", required=True, help="TOML config (docs/training.md lists every key)")
    tr.add_argument("--run-dir", default=None, help="override [run] dir")
    tr.add_argument(
        "--until", default=None, metavar="PHASE",
        help="stop after this phase id (e.g. 00-distill: build the cold-start set here, train elsewhere)",
    )  # fmt: skip
    tr.add_argument(
        "--dry-run", action="store_true",
        help="print the plan (phases, processes, batch layout, evaluator workers, what exists here); train nothing",
    )  # fmt: skip
    tr.add_argument(
        "--processes", type=int, default=None, help="with --dry-run: training processes (one GPU each)"
    )  # fmt: skip
    tr.add_argument(
        "--accelerate-config", default=None, metavar="YAML",
        help="with --dry-run: take the process count from this accelerate config's num_processes",
    )  # fmt: skip
    tr.set_defaults(func=_cmd_train)

    se = sub.add_parser(
        "serve", help="serve a policy as an OpenAI-compatible chat-completions endpoint",
        description="Serve a policy at http://HOST:PORT/v1/chat/completions, so OpenAI-compatible clients "
        "(and kz's own openai: policy) can sample from it. Requests must carry $KZ_SERVE_API_KEY as a bearer "
        "token when it is set.",
    )  # fmt: skip
    se.add_argument("--policy", default=DEFAULT_POLICY, metavar="NAME[:ARG]", help="the policy to serve")
    se.add_argument("--host", default="127.0.0.1", help="address to listen on")
    se.add_argument("--port", type=int, default=8000, help="port to listen on")
    se.add_argument("--model-name", default=None, help="model id clients see (default: the policy spec)")
    se.set_defaults(func=_cmd_serve)

    rep = sub.add_parser(
        "report", help="score table, verdicts per level and (when timed) speedup histogram of a results file",
        description="The score table (pass@k, fast_p@k, per level) of a results file from kz eval, the reasons "
        "of the failures, and a PNG with the verdict breakdown per level, plus a histogram of the speedups "
        "when the results hold timings (GPU runs).",
    )  # fmt: skip
    rep.add_argument("results", help="results JSONL (from kz eval)")
    rep.add_argument("-k", type=int, default=1, help="k for pass@k / fast_p@k")
    rep.add_argument("--include-degenerate", action="store_true", help=INCLUDE_DEGENERATE_HELP)
    rep.add_argument(
        "--plot", default=None, help="PNG path for the plots (default: next to the results file, .plots.png)"
    )
    rep.set_defaults(func=_cmd_report)


# Warnings libraries raise about what our code does knowingly: (message regex, category, module regex).
# Each is narrow, so any other warning, and every error, still shows.
KNOWN_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # TRL's SFT/GRPO configs (and GRPOSettings) pass `gradient_checkpointing`, which transformers 5 renamed to
    # `activation_checkpointing` and maps over itself: nothing to act on in a run's log
    ("`gradient_checkpointing(_kwargs)?` is deprecated", FutureWarning, r"transformers\.training_args"),
    # TRL's GRPOTrainer asks the model through the old names at every step (the demo's log had one per step)
    ("`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated", FutureWarning, r"transformers\.modeling_utils"),
)


def quiet_known_warnings() -> None:
    for message, category, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


class UsageError(KzError):
    """A command line that cannot work as given: one line, exit 2 (argparse's usage-error status)."""


class _StderrWarnings(logging.Handler):
    """kzcore's logged warnings (skipped lines of a results file, ...) as `kz: warning: ...` lines; writes to
    the sys.stderr of the moment, so tests capturing stderr see them."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"kz: warning: {record.getMessage()}", file=sys.stderr)


def _show_warnings() -> None:
    logger = logging.getLogger("kzcore")
    if not any(isinstance(h, _StderrWarnings) for h in logger.handlers):
        logger.addHandler(_StderrWarnings(logging.WARNING))
    logger.setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    from kzcore.plugins import get_plugin_manager

    try:
        parser = build_parser(get_plugin_manager())
    except KzError as exc:  # a broken plugin, or two plugins claiming one name
        print(f"kz: error: {exc}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    _show_warnings()
    quiet_known_warnings()
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"kz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KzError as exc:
        print(f"kz: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the one place every command's Ctrl-C ends: one line, exit 130
        print(f"kz: interrupted: {getattr(args, 'saved', '') or 'nothing was saved'}", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
