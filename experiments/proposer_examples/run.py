"""Does showing a module for each requested API raise the Proposer's acceptance after its cold start?

Two arms that differ only in the Proposer prompt's examples (``[proposer] examples``): ``suite`` (the method's:
two modules of the built-in suite, preferring ones that share a requested API) and ``per-api`` (first a composed
module for each requested API). For each arm and seed:

1. the composer's verified modules (``kz compose``'s default: every catalog API, decontaminated against
   KernelBench levels 1 and 2), made once and shared by the arms, become the Proposer's cold-start SFT rows,
   each the answer to the prompt for its own API set with the arm's examples;
2. SFT of the embedded SmolLM2-135M on those rows at the KernelBench configs' cold-start settings
   (``[proposer] cold_start_steps`` 160, ``[sft]`` batch 8, learning rate 1e-4, max length 3072);
3. ``n`` modules proposed (API sets of 1-2, the configs' ``set_size``; temperature 1, 768 new tokens, as the
   Proposer's GRPO samples) through every gate into the arm's pool.

The numbers are the Proposer's own validation: no held-out problem is read, and the composer's modules near a
KernelBench problem are left out before training. Each (arm, seed) writes ``OUT/ARM-sSEED/summary.json`` when it
ends and is skipped when that exists, so a run cut off resumes; ``OUT/summary.json`` gathers them with a 95 %
Wilson interval on each acceptance rate, and the per-api arm's acceptance minus the suite's per seed, with a 95 % t
interval over the seeds.

    python experiments/proposer_examples/run.py --out runs/proposer-examples --seeds 0 1 --n 64
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from the repository root
    sys.path.insert(0, str(ROOT))

from experiments.kernelbench.report import t_interval  # noqa: E402

ARMS = ("suite", "per-api")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a rate k / n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_difference(runs: list[dict], arm: str = "per-api", control: str = "suite") -> dict | None:
    """``arm``'s acceptance minus ``control``'s, per seed that ran both (the seed fixes the SFT order and the API
    sets drawn), with their mean and a 95 % t interval over those seeds (None below two); None when no seed ran
    both arms."""
    by = {(r["arm"], r["seed"]): r["acceptance"] for r in runs}
    seeds = sorted(s for (a, s) in by if a == arm and (control, s) in by)
    if not seeds:
        return None
    diffs = [by[(arm, s)] - by[(control, s)] for s in seeds]
    t = t_interval(diffs)
    return {"arm": arm, "vs": control, "seeds": seeds, "per_seed": [round(d, 4) for d in diffs],
            "mean": round(sum(diffs) / len(diffs), 4),
            "ci95_t": [round(t[1], 4), round(t[2], 4)] if t else None}  # fmt: skip


def composed(out: Path) -> Path:
    """OUT/composed.jsonl: the composer's modules, made once (seed 0, decontaminated against KernelBench 1-2)."""
    path = out / "composed.jsonl"
    if path.exists():
        return path
    from kzcore.problems import load_problems
    from kzcore.proposer.catalog import load_catalog
    from kzcore.proposer.composer import compose

    heldout = [p for level in (1, 2) for p in load_problems(f"kernelbench:{level}")]
    result = compose(load_catalog(), heldout=heldout)
    result.write(path)
    return path


def arm(
    out: Path, name: str, seed: int, *, base: str, steps: int, n: int, batch: int, device: str, workers: int | None
) -> dict:
    """One arm at one seed: the cold-start rows, the Proposer's SFT, ``n`` proposals through the gates."""
    from kzcore.evaluate.problem_check import check_problems
    from kzcore.policy import SamplingParams, load_policy
    from kzcore.problems import load_problems
    from kzcore.proposer.catalog import load_catalog
    from kzcore.proposer.pool import diversity, read_pool
    from kzcore.proposer.prompt import cold_start_rows, load_examples
    from kzcore.proposer.propose import propose
    from kzcore.proposer.sampler import SamplerConfig
    from kzcore.train.sft import SFTSettings, run_sft

    where = out / f"{name}-s{seed}"
    where.mkdir(parents=True, exist_ok=True)
    catalog = load_catalog()
    modules = load_problems(str(composed(out)))
    rows, counts = cold_start_rows(modules, catalog, load_examples(catalog), seed=seed, per_api=name == "per-api")
    data = where / "proposer-sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t0 = time.perf_counter()
    settings = SFTSettings(max_steps=steps, learning_rate=1e-4, batch_size=8, max_length=3072, seed=seed,
                           use_cpu=device == "cpu", logging_steps=20)  # fmt: skip
    sft = run_sft(base, data, where / "model", settings, quiet=True)
    sft_s = time.perf_counter() - t0
    pool = where / "pool.jsonl"
    pool.unlink(missing_ok=True)  # an arm cut off before its summary proposes again from the start
    policy = load_policy(f"hf:{where / 'model'}?device={device}&batch_size={batch}")
    t0 = time.perf_counter()
    try:
        summary = propose(
            policy, n, catalog=catalog, pool_path=pool, check_problems=functools.partial(check_problems, workers=workers),
            seed=seed, round=0,
            sampler=SamplerConfig(min_size=1, max_size=2),
            params=SamplingParams(temperature=1.0, max_new_tokens=768), batch_size=batch,
            api_examples=modules if name == "per-api" else (),
        )  # fmt: skip
    finally:
        policy.close()
    records = read_pool(pool)
    reasons = Counter((r.failed_gate, r.gates[r.failed_gate].reason[:100]) for r in records if r.failed_gate)
    lo, hi = wilson(summary.accepted, summary.attempted)
    result = {
        "arm": name, "seed": seed, "proposed": summary.attempted, "accepted": summary.accepted,
        "acceptance": summary.accepted / summary.attempted, "acceptance_95": [round(lo, 4), round(hi, 4)],
        "failures": summary.failures, "top_reasons": [[g, r, c] for (g, r), c in reasons.most_common(12)],
        "diversity": diversity(r for r in records if r.accepted).to_metrics(),
        "sft_rows": counts["rows"], "sft_loss_first": sft.get("loss_first"), "sft_loss_last": sft.get("loss_last"),
        "sft_seconds": round(sft_s, 1), "propose_seconds": round(time.perf_counter() - t0, 1),
    }  # fmt: skip
    (where / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/proposer-examples"))
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--n", type=int, default=64, help="modules proposed per arm and seed")
    parser.add_argument("--steps", type=int, default=160, help="the Proposer's cold-start SFT steps")
    parser.add_argument("--batch-size", type=int, default=64, help="prompts per generate call")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--workers", type=int, default=None, help="gate workers (default: one per GPU, or cores/2)")
    parser.add_argument("--base", default=None, help="the Proposer's base checkpoint (default: the embedded SmolLM2)")
    args = parser.parse_args(argv)
    if args.base is None:
        from kz_models.smollm2 import ensure_checkpoint

        args.base = str(ensure_checkpoint())
    args.out.mkdir(parents=True, exist_ok=True)
    done = []
    for seed in args.seeds:
        for name in args.arms:
            path = args.out / f"{name}-s{seed}" / "summary.json"
            if not path.exists():
                result = arm(
                    args.out, name, seed, base=args.base, steps=args.steps, n=args.n, batch=args.batch_size,
                    device=args.device, workers=args.workers,
                )  # fmt: skip
                print(f"{name} seed {seed}: {result['accepted']} of {result['proposed']} accepted", flush=True)
            done.append(json.loads(path.read_text()))
    total = {}
    for name in args.arms:
        rows = [d for d in done if d["arm"] == name]
        k, n = sum(d["accepted"] for d in rows), sum(d["proposed"] for d in rows)
        total[name] = {"accepted": k, "proposed": n, "acceptance": k / n if n else None,
                       "acceptance_95": [round(x, 4) for x in wilson(k, n)], "seeds": [d["seed"] for d in rows]}  # fmt: skip
    difference = paired_difference(done)
    (args.out / "summary.json").write_text(
        json.dumps({"arms": total, "difference": difference, "runs": done}, indent=1) + "\n"
    )
    print(json.dumps({**total, "difference": difference}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
