"""Where evaluation time goes: merge the per-job cProfiles a pool wrote with KZ_WORKER_PROFILE=DIR and print
the functions with the most cumulative and own time (per job, averaged over the jobs merged).

    KZ_WORKER_PROFILE=/tmp/prof python -m bench run harness --levels 1 --out h.json
    python -m bench run profile_report /tmp/prof --top 40 [--match Softmax] [--callees 'timing.py:.*(timed|pair)']
        [--save merged.pstats]

``--callees`` prints, for each function matching the regular expression, where its time went (its callees);
``--save`` writes the merged profile, to be read again with pstats wherever the jobs ran.
"""

from __future__ import annotations

import argparse
import io
import pstats
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--match", default="", help="only the jobs whose file name contains this")
    parser.add_argument(
        "--callees", default="", help="a regular expression: print the callees of the functions it matches"
    )
    parser.add_argument("--save", default="", help="write the merged profile to this file")
    args = parser.parse_args(argv)
    files = sorted(p for p in Path(args.directory).glob("*.pstats") if args.match in p.name)
    if not files:
        print(f"no .pstats files in {args.directory} matching {args.match!r}", file=sys.stderr)
        return 1
    out = io.StringIO()
    stats = pstats.Stats(str(files[0]), stream=out)
    for f in files[1:]:
        stats.add(str(f))
    print(f"{len(files)} jobs merged (totals below are summed over them)")
    for key in ("cumulative", "tottime"):
        out.seek(0)
        out.truncate()
        stats.sort_stats(key).print_stats(args.top)
        text = out.getvalue()
        start = text.find("   ncalls")
        print(f"--- by {key}")
        print(text[start:] if start >= 0 else text)
    if args.callees:
        out.seek(0)
        out.truncate()
        stats.sort_stats("cumulative").print_callees(args.callees)
        print(f"--- callees of {args.callees!r}")
        print(out.getvalue())
    if args.save:
        stats.dump_stats(args.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
