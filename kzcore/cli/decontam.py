"""`kz decontam`: held-out problems split into clean and contaminated by their near duplicates among the
training problems (`kzcore.decontam`)."""

from __future__ import annotations

import json
from pathlib import Path

from kzcore.cli.options import _load_problems, ranged
from kzcore.errors import KzError
from kzcore.types import Command


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


def _configure(parser) -> None:
    from kzcore.decontam import WORST_PAIRS

    parser.description = (
        "Compare every training problem's reference source with every held-out problem's by one "
        "fixed rule (kzcore.decontam: normalised-token similarity, and the set of torch ops used; "
        "docs/decontamination.md) and split the held-out problems into clean and contaminated. Prints the "
        "counts and the most similar near-duplicate pairs; --out writes them all as JSON."
    )
    parser.add_argument(
        "--train", nargs="+", required=True, metavar="SPEC",
        help="training problems: suites, paths or .jsonl files (a cold start's problems.jsonl), "
        "pool:FILE (a task pool's accepted modules), variants[:SUITE] (the generated variants)",
    )  # fmt: skip
    parser.add_argument(
        "--heldout", nargs="+", required=True, metavar="SPEC", help="held-out problems, e.g. kernelbench:1 kernelbench:2"
    )  # fmt: skip
    parser.add_argument("--out", default=None, metavar="FILE.json", help="also write the report as JSON")
    parser.add_argument(
        "--worst", type=ranged(int, 0), default=WORST_PAIRS, metavar="N", help="near-duplicate pairs to print"
    )
    parser.add_argument(
        "--kernelbench", default=None, metavar="PATH",
        help="KernelBench checkout for kernelbench[:levels] specs (default: $KZ_KERNELBENCH, else kz_suites' copy)",
    )  # fmt: skip


def commands() -> list[Command]:
    """`kz decontam`, as kzcore.builtins.commands registers it."""
    return [
        Command(
            name="decontam", run=_cmd_decontam,
            help="held-out problems with a near-duplicate among training problems: clean vs contaminated",
            configure=_configure,
        )
    ]  # fmt: skip
