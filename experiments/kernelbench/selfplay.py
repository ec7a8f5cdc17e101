"""The self-play figures of a run, against issue 33's targets, from its records: per round, the Proposer's modules
(RUN/pool.jsonl: proposed, accepted, the accepted ones' distinct API sets and dedup keys, and how many sat at the
Coder's frontier when first measured) and the share of the Coder's prompts that came from the Proposer (the Coder
phase's `proposer_task_share` in RUN/state.json), with the verdicts the Coder's completions on those tasks got
(a GRPO phase's PHASE/model/samples.jsonl or an `rft` phase's verified samples, where the run kept them). Used
by report.py beside the held-out figures."""

from __future__ import annotations

import collections
from pathlib import Path

FRONTIER = (0.25, 0.75)  # a module is at the Coder's frontier when its first measured pass rate lies here
TARGETS = {"acceptance": 0.30, "frontier_share": 0.25, "proposer_task_share": 0.30}


def first_rate(record) -> float | None:
    """The pass rate measured first (the Proposer phase's own k samples), or None."""
    if not record.pass_rates:
        return None
    rate = min(record.pass_rates, key=lambda r: r.round)
    return rate.passed / rate.k


def proposer_task_statuses(run: Path, number: int) -> dict[str, int] | None:
    """The verdicts of round ``number``'s Coder completions on Proposer tasks (names ``proposed_…``), most
    frequent first: a GRPO phase's samples (PHASE/model/samples.jsonl), or an `rft` phase's verified samples
    (PHASE/rft/*results-LANGUAGE.jsonl); None where the run kept neither. The run's own files only, never its
    origin's: a fork's Coder rounds are its own, and its origin's would be another arm's."""
    from kzcore.jsonl import read_jsonl, stored, stored_glob

    phase = run / f"phases/{number:02d}-coder"
    path = stored(phase / "model/samples.jsonl")
    if path.exists():
        rows = [(r["task"].split("/", 1)[-1], r["status"]) for r in read_jsonl(path)]
    elif files := stored_glob(phase / "rft", "*results-*.jsonl"):
        rows = [(r["problem"], r["status"]) for f in files for r in read_jsonl(f) if r.get("type") == "result"]
    else:
        return None
    counts = collections.Counter(status for task, status in rows if task.startswith("proposed_"))
    return dict(counts.most_common())


def rounds(run: Path) -> list[dict]:
    """One row per round that proposed anything: the Proposer's figures and the Coder's share of its tasks."""
    from experiments.kernelbench.records import located
    from kzcore.proposer.pool import read_pool
    from kzcore.train.schedule import read_state

    path = located(run, "pool.jsonl")  # gzipped when committed, or the origin's where a fork's was the same
    pool = read_pool(path) if path.exists() else []
    metrics = read_state(run).get("metrics", {})
    by_round = collections.defaultdict(list)
    for record in pool:
        by_round[record.provenance.get("round", 0)].append(record)
    rows = []
    for number in sorted(set(by_round) | {int(pid[:2]) for pid in metrics if pid.endswith("-coder")}):
        records = by_round.get(number, [])
        accepted = [r for r in records if r.accepted]
        rates = [first_rate(r) for r in accepted]
        measured = [p for p in rates if p is not None]
        coder = metrics.get(f"{number:02d}-coder", {})
        proposer = metrics.get(f"{number:02d}-proposer", {})
        rows.append({
            "round": number,
            "proposed": len(records),
            "accepted": len(accepted),
            "acceptance": len(accepted) / len(records) if records else None,
            "first_failed_gate": dict(collections.Counter(r.failed_gate for r in records if not r.accepted)),
            "api_sets": len({tuple(sorted(r.apis)) for r in accepted}),
            "dedup_keys": len({r.dedup_key for r in accepted if r.dedup_key}),
            "top_template_share": proposer.get("top_template_share"),
            "measured": len(measured),
            "frontier_share": (
                sum(FRONTIER[0] <= p <= FRONTIER[1] for p in measured) / len(measured) if measured else None
            ),
            "proposer_task_share": coder.get("proposer_task_share"),
            "proposer_task_pass_rate": coder.get("proposer_task_pass_rate"),
            "proposer_task_statuses": proposer_task_statuses(run, number),
        })  # fmt: skip
    return rows


def targets(rows: list[dict]) -> dict:
    """Each target met or not (None: nothing to judge it on). Acceptance: at least 30 % in every round and not
    falling; frontier: at least 25 % of the accepted modules measured, all rounds together; the Coder's prompts:
    at least 30 % from the Proposer in every round from the second on."""
    acceptance = [r["acceptance"] for r in rows if r["acceptance"] is not None]
    measured = sum(r["measured"] for r in rows)
    frontier = sum((r["frontier_share"] or 0) * r["measured"] for r in rows)
    shares = [r["proposer_task_share"] for r in rows if r["round"] >= 2 and r["proposer_task_share"] is not None]
    return {
        "acceptance": (
            None if not acceptance
            else min(acceptance) >= TARGETS["acceptance"] and all(b >= a for a, b in zip(acceptance, acceptance[1:]))
        ),
        "frontier_share": None if not measured else frontier / measured >= TARGETS["frontier_share"],
        "proposer_task_share": None if not shares else min(shares) >= TARGETS["proposer_task_share"],
    }  # fmt: skip


def verdicts(statuses: dict[str, int] | None) -> str:
    if statuses is None:
        return "–"  # the run kept no samples of that phase
    return ", ".join(f"{status} {n}" for status, n in statuses.items()) or "none drawn"


def markdown(by_model: dict[str, list[dict]]) -> list[str]:
    lines = [
        "## Self-play (the Proposer's modules and the Coder's share of them)", "",
        "| model | round | proposed | accepted | acceptance | API sets | frontier / measured | Coder prompts from the Proposer | their pass rate | their verdicts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip

    def pct(x):
        return "–" if x is None else f"{x:.0%}"

    for name, rows in by_model.items():
        for r in rows:
            frontier = f"{round((r['frontier_share'] or 0) * r['measured'])}/{r['measured']}"
            lines.append(
                f"| {name} | {r['round']} | {r['proposed']} | {r['accepted']} | {pct(r['acceptance'])} | "
                f"{r['api_sets']} | {frontier} | {pct(r['proposer_task_share'])} | {pct(r['proposer_task_pass_rate'])} | "
                f"{verdicts(r.get('proposer_task_statuses'))} |"
            )
        met = targets(rows)
        words = {True: "met", False: "not met", None: "nothing to judge"}
        lines.append(f"| {name} | targets | " + "; ".join(f"{k}: {words[v]}" for k, v in met.items()) + " ||||||||")
    return lines
