"""`kz sample` and `kz eval --policy`: prompts go through the prompt hooks to a policy, completions stream
to JSONL and resume, and the evaluator scores them with the pass@k table."""

from __future__ import annotations

import json

from kzcore.cli import main
from kzcore.policy import SamplingParams
from kzcore.problems import load_problems
from kzcore.sampling import read_completions, sample_candidates
from tests import fakes_policy


def test_sample_candidates_streams_and_resumes(plugins, tmp_path):
    pm = plugins("kz_triton", "tests.fakes_policy")
    problems = [p for p in load_problems("builtin:1") if p.name in ("1_ReLU", "2_GELU", "3_Sigmoid")]
    out = tmp_path / "c.jsonl"
    fakes_policy.CALLS.clear()
    cands = sample_candidates(
        fakes_policy.ScriptedPolicy(), problems, "triton", SamplingParams(n=2), out, batch_size=2, pm=pm
    )
    assert fakes_policy.CALLS == [2, 1]  # two batches
    assert len(cands) == 6 and {c.sample for c in cands} == {0, 1}
    rows = read_completions(out)
    assert {r["problem"] for r in rows} == {"1_ReLU", "2_GELU", "3_Sigmoid"}
    assert all(r["prompt_sha"] and r["language"] == "triton" for r in rows)
    again = sample_candidates(fakes_policy.ScriptedPolicy(), problems, "triton", SamplingParams(n=2), out, pm=pm)
    assert fakes_policy.CALLS == [2, 1], "a resumed run must not ask the policy again"
    assert len(again) == 6


def test_prompts_of_similar_length_are_asked_together(plugins, tmp_path):
    """A call decodes until its longest row ends, padded to its longest prompt: the problems are asked shortest
    prompt first, so one long level-2 prompt does not make a call of short level-1 ones pay for it."""
    pm = plugins("kz_triton", "tests.fakes_policy")
    problems = load_problems("builtin:2")[:3] + load_problems("builtin:1")[:3]  # long prompts listed first
    calls: list[list[int]] = []

    class Lengths(fakes_policy.ScriptedPolicy):
        def generate(self, prompts, params):
            calls.append([sum(len(m["content"]) for m in chat) for chat in prompts])
            return super().generate(prompts, params)

    out = tmp_path / "c.jsonl"
    cands = sample_candidates(Lengths(), problems, "triton", SamplingParams(n=1), out, batch_size=2, pm=pm)
    assert len(calls) == 3 and len(cands) == 6
    assert all(max(a) <= min(b) for a, b in zip(calls, calls[1:])), calls
    assert {r["problem"] for r in read_completions(out)} == {p.name for p in problems}


def test_prompt_carries_problem_source_and_language_rules(plugins):
    from kzcore.prompts import build_prompt

    pm = plugins("kz_triton")
    problem = next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")
    chat = build_prompt(problem, "triton", "principles", pm=pm)
    user = chat[-1]["content"]
    assert "torch.relu" in user and "Triton rules" in user and "Tiling" in user
    assert chat[0]["role"] == "system"


def test_kz_eval_with_policy_samples_then_scores(plugins, tmp_path, capsys):
    plugins("kz_triton", "tests.fakes_policy")
    problems_dir = tmp_path / "level1"
    problems_dir.mkdir()
    for p in load_problems("builtin:1"):
        if p.name in ("1_ReLU", "3_Sigmoid"):
            (problems_dir / f"{p.name}.py").write_text(p.source)
    out = tmp_path / "r.jsonl"
    code = main(
        [
            "eval",
            "--problems",
            str(problems_dir),
            "--policy",
            "scripted",
            "-n",
            "2",
            "--out",
            str(out),
            "--workers",
            "1",
            "--trials",
            "2",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "50.0%" in text  # pass@1: ReLU solved, Sigmoid answered with prose
    results = [json.loads(x) for x in out.read_text().splitlines() if '"result"' in x]
    by_problem = {(r["problem"], r["sample"]): r["status"] for r in results}
    assert by_problem[("1_ReLU", 0)] == "correct" and by_problem[("3_Sigmoid", 1)] == "format_error"
    assert (tmp_path / "r.completions.jsonl").exists()


def test_kz_sample_unknown_policy_is_one_line_error(plugins, tmp_path, capsys):
    plugins("kz_triton")
    code = main(["sample", "--problems", "builtin:1", "--policy", "nope", "--out", str(tmp_path / "c.jsonl")])
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kz: error: no policy named 'nope'") and "\n" not in err


def test_kz_propose_files_every_module_and_pool_stats_reports(plugins, tmp_path, capsys):
    plugins("kz_triton", "tests.fakes_policy")
    pool = tmp_path / "pool.jsonl"
    assert main(["propose", "--policy", "scripted", "--n", "3", "--out", str(pool), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "0 of 3 modules accepted" in out and "ast 3" in out
    assert len(pool.read_text().splitlines()) == 3
    assert main(["pool", "stats", str(pool)]) == 0
    out = capsys.readouterr().out
    assert "3 modules, 0 accepted" in out and "no pass-rate histogram" in out
    assert main(["pool", "stats", str(tmp_path / "missing.jsonl")]) == 1


def test_kz_propose_examples_from_shows_a_module_for_each_requested_api(plugins, tmp_path, capsys):
    """`kz propose --examples-from SPEC`: every prompt shows, first, a module of SPEC that uses its requested API
    (here the one module, a chain of the two APIs asked for one at a time); without it, the suite's only."""
    plugins("kz_triton", "tests.fakes_policy")
    relu = next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")
    chain = relu.source.replace("torch.relu(x)", "torch.tanh(torch.relu(x))")
    spec = tmp_path / "shows.jsonl"
    spec.write_text(json.dumps({"name": "relu_tanh", "level": 2, "code": chain}) + "\n")
    argv = ["propose", "--policy", "recording", "--n", "64", "--batch-size", "64", "--min-apis", "1", "--max-apis", "1"]
    argv += ["--workers", "1"]
    fakes_policy.PROMPTS.clear()
    assert main([*argv, "--out", str(tmp_path / "a.jsonl"), "--examples-from", str(spec), "--seed", "7"]) == 0
    asked = [c[-1]["content"] for c in fakes_policy.PROMPTS]
    fakes_policy.PROMPTS.clear()
    assert main([*argv, "--out", str(tmp_path / "b.jsonl"), "--seed", "7"]) == 0
    plain = [c[-1]["content"] for c in fakes_policy.PROMPTS]
    assert len(asked) == len(plain) == 64 and any("- ReLU (" in u or "- Tanh (" in u for u in asked)
    for with_shows, without in zip(asked, plain):
        wanted = "- ReLU (" in with_shows or "- Tanh (" in with_shows
        assert (chain.strip() in with_shows) == wanted and chain.strip() not in without
    capsys.readouterr()


def test_the_cost_of_a_held_out_evaluation_counts_only_what_was_sampled_now(tmp_path):
    """A resumed evaluation reuses the completions an earlier run left: their tokens are not this call's, so
    tokens/s reads the rows sampled now over the sampling time; nothing sampled gives no rate, not 0."""
    import json

    from kzcore.evaluate.policy_eval import cost_line, sampling_cost

    path = tmp_path / "completions-triton.jsonl"
    rows = [
        {"problem": "1_A", "level": 1, "language": "triton", "sample": 0, "completion": "x", "tokens": 100},
        {"problem": "2_B", "level": 1, "language": "triton", "sample": 0, "completion": "y", "tokens": 30},
        {"problem": "2_B", "level": 1, "language": "triton", "sample": 1, "completion": "z", "tokens": 10},
        {"problem": "2_B", "level": 1, "language": "cuda", "sample": 0, "completion": "w", "tokens": 999},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cost = sampling_cost(path, "triton", {(1, "1_A")}, sampling_s=2.0, evaluating_s=1.5, results=3)
    assert cost == {
        "sampled_completions": 2, "generated_tokens": 40, "sampling_s": 2.0, "tokens_per_s": 20.0,
        "evaluating_s": 1.5, "results": 3,
    }  # fmt: skip
    reused = sampling_cost(path, "triton", {(1, "1_A"), (1, "2_B")}, 0.0, 0.2, 3)
    assert reused["sampled_completions"] == 0 and reused["tokens_per_s"] is None
    assert (
        cost_line(cost, path)
        == "sampled 2 completions (40 tokens) in 2.0 s, 20.0 tokens/s; evaluated 3 candidates in 1.5 s"
    )
    assert cost_line(reused, path).startswith(f"completions reused from {path}; evaluated 3 candidates")
