"""The Proposer's commands: `kz propose` (API sets -> modules -> gates -> task pool), `kz compose` (verified
cold-start modules composed from the API catalog) and `kz pool stats`."""

from __future__ import annotations

import json
from pathlib import Path

from kzcore.cli.options import DEFAULT_POLICY, _add_eval_args, _add_workers, _config_from, _load_problems, ranged
from kzcore.errors import KzError
from kzcore.types import Command


def _cmd_propose(args) -> int:
    import functools

    from rich.console import Console

    from kzcore.evaluate.problem_check import check_problems
    from kzcore.policy import SamplingParams, load_policy
    from kzcore.proposer.catalog import load_catalog
    from kzcore.proposer.propose import propose
    from kzcore.proposer.sampler import SamplerConfig

    catalog = load_catalog(*args.catalog)
    shows = [p for spec in args.examples_from for p in _load_problems(spec, None)]
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
            batch_size=args.batch_size, api_examples=shows,
            progress=lambda r: console.print(f"{r.id} {'+'.join(r.apis)}: {r.failed_gate or 'accepted'}"),
        )  # fmt: skip
    finally:
        policy.close()
    console.print(f"{summary.accepted} of {summary.attempted} modules accepted -> {summary.pool_path}")
    if summary.failures:
        console.print("gate failures: " + ", ".join(f"{g} {n}" for g, n in summary.failures.items()))
    return 0


def _cmd_compose(args) -> int:
    from kzcore.jsonl import write_text_atomic
    from kzcore.proposer.catalog import load_catalog
    from kzcore.proposer.composer import compose

    catalog = load_catalog(*args.catalog)
    apis = [a.strip() for a in args.apis.split(",") if a.strip()] if args.apis else None
    heldout = [p for spec in args.heldout for p in _load_problems(spec, args.kernelbench)]
    result = compose(catalog, per_api=args.per_api, seed=args.seed, apis=apis, heldout=heldout)
    out = Path(args.out)
    result.write(out)
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
            [m.to_problem() for m in result.modules], catalog, load_examples(catalog), args.seed,
            per_api=args.sft_examples == "per-api",
        )  # fmt: skip
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
    console.print(f"accepted diversity: {_diversity_line(st.diversity)}", soft_wrap=True)
    if len(st.rounds) > 1:
        for n, d in st.rounds.items():
            line = f"  round {n if n >= 0 else '?'}: {d.accepted} accepted, {_diversity_line(d)}"
            console.print(line, soft_wrap=True)
    return 0


def _diversity_line(d) -> str:
    """One `kzcore.proposer.pool.Diversity` in words; the share is "n/a" with nothing accepted."""
    share = "n/a" if d.top_template_share is None else f"{d.top_template_share:.2f}"
    return f"{d.api_sets} API sets, {d.dedup_keys} dedup keys, top template share {share}"


def _configure_propose(parser) -> None:
    parser.description = (
        "The Proposer: sample sets of PyTorch APIs from the catalog, ask a policy for a problem "
        "module using each, pass every module through the gates (parses, runs in a worker, deterministic, "
        "not degenerate, not a duplicate), and append one record per module, accepted or not, to the task "
        "pool --out, batch by batch."
    )
    parser.add_argument("--policy", default=DEFAULT_POLICY, metavar="NAME[:ARG]", help="the Proposer's policy")
    parser.add_argument("--n", type=ranged(int, 1), default=8, help="modules to propose")
    parser.add_argument("--out", default="runs/pool.jsonl", help="task pool JSONL (appended)")
    parser.add_argument("--catalog", action="append", default=[], help="extra catalog JSON files (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="seed for API sets and sampling")
    parser.add_argument("--round", type=ranged(int, 0), default=0, help="round number recorded with each module")
    parser.add_argument("--min-apis", type=ranged(int, 1), default=1, help="fewest APIs per sampled set")
    parser.add_argument("--max-apis", type=ranged(int, 1), default=4, help="most APIs per sampled set")
    parser.add_argument("--batch-size", type=ranged(int, 1), default=8, help="prompts per generate call")
    parser.add_argument("--temperature", type=ranged(float, 0), default=1.0, help="sampling temperature")
    parser.add_argument("--max-new-tokens", type=ranged(int, 1), default=768, help="most tokens per module")
    parser.add_argument(
        "--examples-from", action="append", default=[], metavar="SPEC",
        help="problems (a spec, repeatable) whose modules the prompt shows first, one for each requested API that "
        "uses it ([proposer] examples = \"per-api\"; e.g. kz compose's OUT); default: the suite's examples only",
    )  # fmt: skip
    # the Proposer's gates are problem checks too, kept short: most proposed modules are small
    _add_eval_args(
        parser, ("device", "timeout_s"),
        device={"help": "where modules are checked"}, timeout_s={"default": 60.0, "help": "seconds per module check"},
    )  # fmt: skip
    _add_workers(parser)


def _configure_compose(parser) -> None:
    parser.description = (
        "For every API of the catalog, compose KernelBench-format modules from its signature (the "
        "API alone, and chained with one or two other catalog APIs whose shapes fit), keep only those that pass "
        "every Proposer gate (AST gate for their API set, distinct dedup key, runs, deterministic, finite, not "
        "degenerate, on this CPU at their small profile) and are no near duplicate of a --heldout problem "
        "(kzcore.decontam), and write them as a problem JSONL (--problems, [problems] tasks, [proposer] "
        "cold_start_modules) with a coverage table beside it (OUT.coverage.json)."
    )
    parser.add_argument("--out", default="runs/composed.jsonl", help="problem JSONL to write (replaced)")
    parser.add_argument("--per-api", type=ranged(int, 1), default=3, help="modules per catalog API")
    parser.add_argument("--seed", type=int, default=0, help="seed for partners, families and sizes")
    parser.add_argument("--apis", default=None, metavar="A,B", help="only these catalog APIs (default: all)")
    parser.add_argument("--catalog", action="append", default=[], help="extra catalog JSON files (repeatable)")
    parser.add_argument(
        "--heldout", nargs="*", default=["kernelbench:1", "kernelbench:2"], metavar="SPEC",
        help="held-out problems no module may near-duplicate (none: no decontamination)",
    )  # fmt: skip
    parser.add_argument(
        "--kernelbench", default=None, metavar="PATH",
        help="KernelBench checkout for kernelbench specs (default: $KZ_KERNELBENCH, else kz_suites' copy)",
    )  # fmt: skip
    parser.add_argument("--sft", default=None, metavar="FILE.jsonl", help="also write the Proposer cold-start SFT rows")
    parser.add_argument(
        "--sft-examples", choices=("suite", "per-api"), default="suite",
        help="the SFT rows' prompt examples ([proposer] examples): per-api shows a composed module for each "
        "requested API first (then kz propose --examples-from OUT asks the same way)",
    )  # fmt: skip


def _configure_pool(parser) -> None:
    parser.description = "Tools for the task pool that kz propose (and the trainer's Proposer phases) write."
    po_sub = parser.add_subparsers(dest="pool_cmd", required=True)
    ps = po_sub.add_parser(
        "stats", help="gate failure counts and a pass-rate histogram PNG",
        description="How many modules of a task pool were accepted, which gate the others failed first (and "
        "why), and a histogram PNG of the Coder pass rates recorded for accepted tasks.",
    )  # fmt: skip
    ps.add_argument("pool", help="task pool JSONL (from kz propose)")
    ps.add_argument("--png", default=None, help="histogram path (default: next to the pool file)")
    ps.set_defaults(func=_cmd_pool)


def commands() -> list[Command]:
    """`kz propose`, `kz compose` and `kz pool`, as kzcore.builtins.commands registers them."""
    return [
        Command(
            name="propose", run=_cmd_propose, help="Proposer: API sets -> modules -> gates -> task pool",
            configure=_configure_propose,
        ),
        Command(
            name="compose", run=_cmd_compose, help="verified Proposer cold-start modules composed from the API catalog",
            configure=_configure_compose,
        ),
        Command(name="pool", run=_cmd_pool, help="task pool tools", configure=_configure_pool),
    ]  # fmt: skip
