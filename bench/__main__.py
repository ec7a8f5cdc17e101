"""The one entry point to the benches: ``python -m bench list | run NAME [ARGS...] | summarize ... | index``.
The commands that read the registry import no bench module; ``run`` imports the one it runs. Neighbours:
`bench.registry` (the benches), `bench.summarize` and `bench.index` (the results)."""

from __future__ import annotations

import sys

from bench import registry

USAGE = """usage: python -m bench COMMAND [ARGS...]

  list                    the benches: name, what each needs, what it measures
  run NAME [ARGS...]      run bench NAME with ARGS, passed to it unchanged (run NAME --help for its options)
  summarize [--brief | --stages] FILE.json [...]   a short summary of bench reports
  index [--check] [--results DIR]                  write (or check) bench/results/INDEX.md"""


def list_benches() -> int:
    width = max(len(bench.name) for bench in registry.BENCHES)
    for bench in registry.BENCHES:
        print(f"{bench.name:<{width}}  {bench.needs:<7}  {bench.description}")
    return 0


def run(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench run NAME [ARGS...] (python -m bench list names them)", file=sys.stderr)
        return 2
    try:
        bench = registry.get(argv[0])
    except registry.UnknownBench as error:
        print(f"bench: {error.args[0]}", file=sys.stderr)
        return 2
    return bench.run(argv[1:])


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "list":
        return list_benches()
    if command == "run":
        return run(rest)
    if command == "summarize":
        from bench import summarize

        return summarize.main(rest)
    if command == "index":
        from bench import index

        return index.main(rest)
    if command in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    print(USAGE if not command else f"bench: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
