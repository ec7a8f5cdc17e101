"""`kz suite list | show | check`: the registered suites, a suite's problems and size profiles (or one
problem's source), and the problem checks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kzcore.cli.options import (
    KERNELBENCH_HELP,
    _add_eval_args,
    _add_only,
    _add_workers,
    _config_from,
    _load_problems,
    _only,
    ranged,
)
from kzcore.errors import KzError
from kzcore.types import Command


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


def _report_line(report) -> str:
    import json

    from kzcore.types import to_json

    return json.dumps({**to_json(report), "key": report.key, "ok": report.ok}) + "\n"


def _suite_check(problems, args, console) -> int:
    from rich.table import Table

    from kzcore.evaluate.problem_check import DEVICE_BUDGET, check_problems, unchecked_reason

    config = _config_from(args)
    budget = int(args.max_memory * 2**30) if args.max_memory else DEVICE_BUDGET
    started = time.perf_counter()
    args.saved = "nothing was saved (kz suite check prints its table once every problem is checked)"
    if args.out:  # each report filed as it comes, so a check stopped part-way keeps the problems it finished
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        filed = []
        with out.open("w") as stream:

            def file_report(report) -> None:
                stream.write(_report_line(report))
                stream.flush()
                filed.append(report.key)
                args.saved = f"{len(filed)} of {len(problems)} problem reports so far are in {out}"

            reports = check_problems(problems, config, workers=args.workers, max_bytes=budget, on_report=file_report)
        tmp = out.with_name(out.name + ".tmp")  # whole: the reports again, in the suite's order
        tmp.write_text("".join(_report_line(r) for r in reports))
        tmp.replace(out)
    else:
        reports = check_problems(problems, config, workers=args.workers, max_bytes=budget)
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
    unchecked = [r.key for r in reports if unchecked_reason(r)]
    if unchecked:  # neither passed nor flagged: a failed check (out of memory, a timeout) says nothing of them
        console.print(
            f"{len(unchecked)} reached no verdict (their check did not run to the end): {', '.join(unchecked)}"
        )
    # the wall time beside the checks' own seconds: what went to worker start-up, dispatch and re-checks
    inside = sum(r.seconds or 0.0 for r in reports)
    console.print(f"checked in {time.perf_counter() - started:.1f} s ({inside:.1f} s inside the problems' checks)")
    return 0


def _configure(parser) -> None:
    parser.description = (
        "Problem suites: list the registered ones, show a suite's problems (or one problem's "
        "source), or check that each problem runs and gives a usable reference output."
    )
    suite_sub = parser.add_subparsers(dest="suite_cmd", required=True)
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
    check.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write one JSON line per problem's report, each as its check ends (in the suite's order once all have)",
    )
    # a problem check is its own kind of job (the reference alone, run three times): its own timeout
    _add_eval_args(
        check, ("device", "size", "timeout_s"),
        device={"help": "where problems run"}, timeout_s={"default": 120.0, "help": "seconds per problem"},
    )  # fmt: skip
    _add_workers(check)
    check.add_argument(
        "--max-memory", type=ranged(float, 0, low_open=True), default=None, metavar="GIB",
        help="memory budget per problem in GiB (default: 0.8 x the device's free memory)",
    )  # fmt: skip
    check.add_argument("--kernelbench", default=None, metavar="PATH", help=KERNELBENCH_HELP)
    _add_only(check, "check", ", e.g. to re-check a few alone")
    check.set_defaults(func=_cmd_suite, name=None)


def commands() -> list[Command]:
    """`kz suite`, as kzcore.builtins.commands registers it."""
    return [Command(name="suite", run=_cmd_suite, help="list suites or show a suite's problems", configure=_configure)]
