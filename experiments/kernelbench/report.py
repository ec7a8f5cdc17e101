"""The KernelBench held-out report: one row per trained model (arm, seed, phase), level and language, recomputed
from each run's per-sample verdicts (RUN/heldout/PHASE/results-LANGUAGE.jsonl), with 95 % intervals, and the
paired differences that say whether CA-GRPO beats its controls.

    R=experiments/kernelbench/results
    python experiments/kernelbench/report.py --out $R/DATE-MACHINE-sNN/kb \\
        ca-grpo-s0=$R/SESSION/runs/kb-seed0 sft-s0=$R/SESSION/runs/kb-seed0-sft ...

What it computes, per model and (level, language), over the problems every given run's problem check kept
(RUN/heldout-problems.json; runs of different sessions check afresh) and, again, over the clean ones (no
near-duplicate in the training data: RUN/decontamination.json): pass@1 and pass@n (unbiased, n samples a
problem), fast_1 (correct and faster than PyTorch beyond the pair's measured noise: kzcore.metrics.is_faster),
and how far the samples got (`LADDER`: parsed, compiled, ran), each with a percentile bootstrap interval over
problems (resampled with a fixed seed). Per seed, the difference of each arm's final model from the SFT model
it started from and from the other arms, in pass@1 and in the compile rate, paired by problem, with its
bootstrap interval; across seeds, the mean difference with a t interval over the seeds (each trained model
counts once, not its samples). Beside them, each run's self-play figures against issue 33's targets
(selfplay.py: the Proposer's acceptance, distinct API sets, frontier share per round, the Coder's share of
Proposer tasks). Runs are read as committed (records.py: gzipped, a fork's shared files in its origin). Writes
OUT.json, OUT.md (the headline table first) and OUT.png (pass@1 with intervals; acceptance per round)."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.kernelbench import selfplay  # noqa: E402
from experiments.kernelbench.records import located, located_glob  # noqa: E402
from kzcore.jsonl import read_jsonl  # noqa: E402
from kzcore.metrics import is_faster, pass_at_k  # noqa: E402
from kzcore.results import read_results  # noqa: E402
from kzcore.types import Status  # noqa: E402

RESAMPLES = 2000
# How far a sample got, each stage a share of the samples that reached at least it: a code block defining the
# module (not format_error), past the static check and the compiler, and run to an output that was compared
# (incorrect, hack_suspected or correct). Where pass@k is 0 for every arm, these still tell the arms apart.
_RAN = {Status.INCORRECT, Status.HACK_SUSPECTED, Status.CORRECT}
LADDER = {
    "parsed": {*_RAN, Status.STATIC_CHECK_FAILED, Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.TIMEOUT},
    "compiled": {*_RAN, Status.RUNTIME_ERROR, Status.TIMEOUT},
    "ran": _RAN,
}
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # df -> t


def parse_label(label: str) -> tuple[int, str]:
    """``suite:levelN/name`` (or ``levelN/name``) -> (N, name)."""
    key = label.split(":", 1)[-1]
    level, name = key.split("/", 1)
    return int(level.removeprefix("level")), name


def scored_phases(run: Path) -> list[str]:
    """The phases of ``run`` whose held-out rows scored the held-out problems, in order."""
    rows = read_jsonl(located(run, "heldout.jsonl"))
    return [r["phase"] for r in rows if any(k.startswith("heldout_") and k.endswith("_statuses") for k in r)]


def problem_sets(run: Path) -> tuple[set, set | None]:
    """(kept, clean): the (level, name) keys the problem check kept and, when decontamination ran, the clean ones."""
    record = json.loads(located(run, "heldout-problems.json").read_text())
    kept = {parse_label(p) for p in record["problems"] if p not in record["flagged"]}
    path = located(run, "decontamination.json")
    clean = {parse_label(p) for p in json.loads(path.read_text())["clean"]} & kept if path.exists() else None
    return kept, clean


def per_problem(results, problems: set, n: int) -> dict[tuple[int, str], dict]:
    """Each problem's pass@1, pass@n and fast_1 estimates from its samples (a problem with none scores 0)."""
    by: dict[tuple[int, str], list] = {key: [] for key in problems}
    for r in results:
        if (r.level, r.problem) in by:
            by[(r.level, r.problem)].append(r)
    out = {}
    for key, rs in by.items():
        m = len(rs)
        c = sum(r.correct for r in rs)
        f = sum(is_faster(r, 1.0) for r in rs)
        out[key] = {
            "samples": m,
            "pass@1": c / m if m else 0.0,
            f"pass@{n}": pass_at_k(m, c, n) if m >= n else (1.0 if c else 0.0),
            "fast_1": f / m if m else 0.0,
        }
        for stage, reached in LADDER.items():
            out[key][stage] = sum(r.status in reached for r in rs) / m if m else 0.0
    return out


def completion_lengths(path: Path, table: dict) -> None:
    """Into each problem's row of ``table``: ``at_limit``, the share of its completions that stopped at the token
    limit (``finish_reason`` "length"), and ``tokens``, their mean length, from the completions file ``path``
    (the results file's neighbour). A problem without completions there gets neither, and the averages skip it."""
    by: dict[tuple[int, str], list[dict]] = {}
    for row in read_jsonl(path):
        by.setdefault((int(row["level"]), row["problem"]), []).append(row)
    for key, rows in by.items():
        if key in table:
            table[key]["at_limit"] = sum(r.get("finish_reason") == "length" for r in rows) / len(rows)
            table[key]["tokens"] = statistics.fmean(float(r.get("tokens") or 0) for r in rows)


def bootstrap(values: list[float], seed: int = 0) -> tuple[float, float]:
    """95 % percentile interval of the mean of ``values`` over ``RESAMPLES`` resamples."""
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(RESAMPLES))
    return means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def t_interval(values: list[float]) -> tuple[float, float, float] | None:
    """Mean and 95 % t interval over trained models (seeds); None with fewer than two."""
    if len(values) < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = T95.get(len(values) - 1, 1.96) * sd / len(values) ** 0.5
    return mean, mean - half, mean + half


def score(table: dict, subset: set, metric: str) -> dict:
    values = [table[key][metric] for key in sorted(subset) if metric in table[key]]
    low, high = bootstrap(values)
    return {"mean": statistics.fmean(values) if values else None, "ci95": [low, high], "problems": len(values)}


def common_problems(runs: list[Path]) -> tuple[set, set | None]:
    """(kept, clean) shared by every run: the problems each run's check kept, and the clean ones where every run
    decontaminated. Runs of different sessions check the problems afresh, and a problem the check reached no
    verdict on in one session may be flagged in another: every model is scored on the same problems."""
    sets = [problem_sets(run) for run in runs]
    kept = set.intersection(*(k for k, _ in sets))
    cleans = [c for _, c in sets if c is not None]
    clean = set.intersection(*cleans) & kept if len(cleans) == len(sets) else None
    return kept, clean


def arm_and_seed(name: str) -> tuple[str, str]:
    """A model's name, ARM-sSEED (``ca-grpo-s0``), split into its arm and its seed."""
    arm, _, seed = name.rpartition("-s")
    return arm, seed


def model_rows(name: str, run: Path, n: int, problems: tuple[set, set | None] | None = None) -> tuple[list[dict], dict]:
    """The rows of one run (each scored phase x language x level) and its per-problem tables by (phase, language),
    over ``problems`` (kept, clean; default: the run's own)."""
    arm, seed = arm_and_seed(name)
    kept, clean = problems or problem_sets(run)
    rows, tables = [], {}
    for phase in scored_phases(run):
        for path in located_glob(run, f"heldout/{phase}", "results-*.jsonl"):
            language = path.name.split(".")[0].removeprefix("results-")  # results-cuda.jsonl(.gz)
            table = per_problem(read_results(path), kept, n)
            completions = located(run, f"heldout/{phase}/completions-{language}.jsonl")
            if completions.exists():
                completion_lengths(completions, table)
            tables[(phase, language)] = table
            for level in sorted({lvl for lvl, _ in kept}) + ["all"]:
                chosen = {k for k in kept if level == "all" or k[0] == level}
                row = {"model": name, "arm": arm, "seed": seed, "phase": phase, "language": language, "level": level}
                for metric in ("pass@1", f"pass@{n}", "fast_1", *LADDER):
                    row[metric] = score(table, chosen, metric)
                if clean is not None:
                    row["clean_pass@1"] = score(table, chosen & clean, "pass@1")
                if any("at_limit" in table[k] for k in chosen):
                    row["at_limit"] = score(table, chosen, "at_limit")
                    row["tokens"] = score(table, chosen, "tokens")
                rows.append(row)
    return rows, tables


def paired(a: dict, b: dict, metric: str = "pass@1") -> dict:
    """Mean of a - b over the problems both score, paired by problem, with its bootstrap interval."""
    keys = sorted(set(a) & set(b))
    diffs = [a[k][metric] - b[k][metric] for k in keys]
    low, high = bootstrap(diffs)
    return {"mean": statistics.fmean(diffs) if diffs else None, "ci95": [low, high], "problems": len(keys)}


COMPARED = ("pass@1", "compiled")  # the paired differences: the benchmark's metric, and how far samples got


def unscored_end(run: Path, tables: dict) -> str:
    """The run's last finished phase when it is later than its last scored one (a run cut off before its final
    evaluation, whose final model was never scored), else ""."""
    from kzcore.train.schedule import read_state

    done = read_state(run).get("done", [])
    last = max((phase for phase, _ in tables), default="")
    return done[-1] if done and done[-1] > last else ""


# The arms in the order their differences are read: each against the ones after it (CA-GRPO against its
# controls, then the controls against each other), so no pair is given twice with its sign flipped. An arm not
# named here comes after these, in name order.
ARM_ORDER = ("ca-grpo", "sft", "rft", "frozen")


def arm_rank(arm: str) -> tuple[int, str]:
    return (ARM_ORDER.index(arm), "") if arm in ARM_ORDER else (len(ARM_ORDER), arm)


def comparisons(models: dict[str, tuple[Path, dict]], unscored: dict[str, str] | None = None) -> list[dict]:
    """Per seed, language and metric (`COMPARED`): each arm's final model against its SFT model and against the
    final model of each arm after it in `ARM_ORDER` (paired by problem); across seeds, the mean difference with a
    t interval. A model in ``unscored`` (its final model never scored: `unscored_end`) takes part in none."""
    by_seed: dict[str, dict[str, dict]] = {}
    for name, (_, tables) in models.items():
        arm, seed = arm_and_seed(name)
        if name not in (unscored or {}):
            by_seed.setdefault(seed, {})[arm] = tables
    out: list[dict] = []
    pooled: dict[tuple, list[float]] = {}
    for seed, arms in sorted(by_seed.items()):
        finals = {arm: max(p for p, _ in t) for arm, t in arms.items() if t}
        for arm, tables in arms.items():
            final = finals.get(arm)
            for (phase, language), table in tables.items():
                if phase != final:
                    continue
                against = {"SFT": tables.get(("00-sft", language))}
                later = [other for other in arms if arm_rank(other) > arm_rank(arm)]
                against.update({other: arms[other].get((finals[other], language)) for other in later})
                for name, base in against.items():
                    if base is None or (name == "SFT" and final == "00-sft"):
                        continue
                    for metric in COMPARED:
                        d = paired(table, base, metric)
                        out.append({"seed": seed, "language": language, "arm": arm, "vs": name, "metric": metric, **d})
                        pooled.setdefault((metric, language, arm, name), []).append(d["mean"])
    summary = []
    for (metric, language, arm, name), means in sorted(pooled.items()):
        t = t_interval(means)
        summary.append({"language": language, "arm": arm, "vs": name, "metric": metric, "seeds": len(means),
                        "per_seed": means, "mean": t[0] if t else means[0],
                        "t95": [t[1], t[2]] if t else None})  # fmt: skip
    return out + [{"across_seeds": s} for s in summary]


def fmt(s: dict | None) -> str:
    if not s or s["mean"] is None:
        return "–"
    return f"{s['mean']:.3f} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]"


def markdown(
    rows: list[dict], compared: list[dict], n: int, unscored: dict[str, str] | None = None, no_sft: tuple[str, ...] = ()
) -> str:
    head = f"| model | phase | level | language | problems | pass@1 [95% CI] | pass@{n} | fast_1 | clean pass@1 |"
    lines = [
        "## Held-out: KernelBench",
        "",
        "Every model is scored on the problems every run's problem check kept.",
        "",
    ]
    for name, phase in (unscored or {}).items():
        lines += [f"{name}: its final model was never scored (the run ended after {phase}, before its final "
                  "evaluation); its rows are its earlier models and it takes part in no difference.", ""]  # fmt: skip
    for name in no_sft:
        lines += [f"{name}: its run did not score its own SFT model (a session that ran only forks, with the main "
                  "job's `[heldout] phases = \"last\"`): it is compared with the other arms of its seed only.", ""]  # fmt: skip
    lines += [head, "|" + " --- |" * 9]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['phase']} | {r['level']} | {r['language']} | {r['pass@1']['problems']} | "
            f"{fmt(r['pass@1'])} | {fmt(r[f'pass@{n}'])} | {fmt(r['fast_1'])} | {fmt(r.get('clean_pass@1'))} |"
        )
    lines += ["", "## How far the samples got", "",
              "Share of samples that reached at least each stage: a code block defining the module (parsed), past "
              "the static check and the compiler (compiled), run to an output that was compared (ran), correct.",
              "", "| model | phase | level | language | parsed | compiled | ran | correct |",
              "|" + " --- |" * 8]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['phase']} | {r['level']} | {r['language']} | {fmt(r.get('parsed'))} | "
            f"{fmt(r.get('compiled'))} | {fmt(r.get('ran'))} | {fmt(r['pass@1'])} |"
        )
    lengths = [r for r in rows if r["level"] == "all" and "at_limit" in r]
    if lengths:
        lines += ["", "## Completion lengths", "",
                  "Share of completions that stopped at the token limit (`finish_reason` \"length\") and their mean "
                  "length in tokens, per problem then averaged, all kept problems.",
                  "", "| model | phase | language | at the limit | mean tokens |", "|" + " --- |" * 5]  # fmt: skip
        for r in lengths:
            t = r["tokens"]
            lines.append(
                f"| {r['model']} | {r['phase']} | {r['language']} | {fmt(r['at_limit'])} | "
                f"{t['mean']:.0f} [{t['ci95'][0]:.0f}, {t['ci95'][1]:.0f}] |"
            )
    lines += ["", "## Differences (paired by problem)", "", "| metric | seed | language | arm | vs | mean [95% CI] |",
              "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for c in compared:
        if "across_seeds" in c:
            s = c["across_seeds"]
            if s["seeds"] < 2:  # one seed: its row above says it all (the JSON keeps the summary)
                continue
            ci = f"[{s['t95'][0]:.3f}, {s['t95'][1]:.3f}] (t, {s['seeds']} seeds)" if s["t95"] else ""
            lines.append(f"| {s['metric']} | all | {s['language']} | {s['arm']} | {s['vs']} | {s['mean']:.3f} {ci} |")
        else:
            lines.append(f"| {c['metric']} | {c['seed']} | {c['language']} | {c['arm']} | {c['vs']} | {fmt(c)} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], play: dict[str, list[dict]], path: Path) -> None:
    """OUT.png: each model's pass@1 over all kept problems with its interval, per language and scored phase; and
    each model's Proposer acceptance per round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    overall = [r for r in rows if r["level"] == "all"]
    # one colour an arm and one marker a seed, the same in both panels
    named = [arm_and_seed(name) for name in play]
    arms = sorted({r["arm"] for r in overall} | {arm for arm, _ in named})
    seeds = sorted({r["seed"] for r in overall} | {seed for _, seed in named})
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 0.35 * max(len(overall), 8) + 1.5))
    labels = [f"{r['model']} {r['phase']} {r['language']}" for r in overall]
    for y, r in enumerate(overall):
        s = r["pass@1"]
        left.errorbar(s["mean"], y, xerr=[[s["mean"] - s["ci95"][0]], [s["ci95"][1] - s["mean"]]],
                      fmt="os^Dv"[seeds.index(r["seed"]) % 5], color=f"C{arms.index(r['arm'])}")  # fmt: skip
    left.set_yticks(range(len(overall)), labels, fontsize=7)
    left.set_xlabel("KernelBench pass@1 (95 % bootstrap interval over problems)")
    for name, rounds in play.items():
        arm, seed = arm_and_seed(name)
        pts = [(r["round"], r["acceptance"]) for r in rounds if r["acceptance"] is not None]
        if pts:
            right.plot(*zip(*pts), marker="os^Dv"[seeds.index(seed) % 5], color=f"C{arms.index(arm)}", label=name)
    right.axhline(selfplay.TARGETS["acceptance"], ls=":", color="grey")
    right.set_xlabel("round")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set_ylabel("Proposer acceptance (all gates)")
    right.set_ylim(-0.05, 1.05)
    if right.lines[1:]:
        right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="ARM-sSEED=RUN_DIR (e.g. ca-grpo-s0=runs/kb-seed0)")
    parser.add_argument("--n", type=int, default=4, help="samples per problem ([heldout] n): pass@n")
    parser.add_argument("--out", type=Path, required=True, help="OUT.json and OUT.md are written")
    args = parser.parse_args(argv)
    models, rows, runs = {}, [], {}
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep or "-s" not in name:
            parser.error(f"{spec!r}: expected ARM-sSEED=RUN_DIR")
        run = Path(path)
        if not located(run, "heldout-problems.json").exists():
            parser.error(f"{run}: no heldout-problems.json (not a run with held-out scoring)")
        runs[name] = run
    problems = common_problems(list(runs.values()))
    for name, run in runs.items():
        model_rows_, tables = model_rows(name, run, args.n, problems)
        models[name] = (run, tables)
        rows += model_rows_
    unscored = {name: phase for name, (run, tables) in models.items() if (phase := unscored_end(run, tables))}
    no_sft = tuple(name for name, (_, tables) in models.items() if not any(p == "00-sft" for p, _ in tables))
    compared = comparisons(models, unscored)
    play = {name: selfplay.rounds(run) for name, (run, _) in models.items()}
    report = {
        "problems": {"kept_by_every_run": len(problems[0]), "clean": len(problems[1]) if problems[1] is not None else None},
        "rows": rows, "comparisons": compared, "unscored_end": unscored, "sft_unscored": list(no_sft),
        "self_play": {name: {"rounds": r, "targets": selfplay.targets(r)} for name, r in play.items()},
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    text = markdown(rows, compared, args.n, unscored, no_sft) + "\n" + "\n".join(selfplay.markdown(play)) + "\n"
    args.out.with_suffix(".md").write_text(text)
    plot(rows, play, args.out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
