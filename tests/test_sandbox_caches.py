"""Candidates cannot write where kzcore, a policy or the trainer reads: through the real worker pool (language
"triton" under the CPU interpreter, built-in 1_ReLU), a candidate tries every way of writing into each of
kzcore's caches (problem-check reports, the converted model, the kzcore cache itself), the Hugging Face cache,
~/.cache, the shared Triton cache and the home directory, and nothing may land; its own compiler cache, a
directory of its worker's scratch, still works. Once with the read-only filesystem (a mount namespace) and
once with it switched off, where the Python-level write audit stands in (KZ_SANDBOX_SKIP=readonly-fs).
The rule itself (which declared caches a worker may write) is tested without workers."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kzcore.cache import PROBLEM_CHECKS, cache_dir, cache_root
from kzcore.executors import caches as cache_fence
from kzcore.executors.local import LocalPool
from kzcore.problems import load_problems
from kzcore.types import Candidate, EvalConfig, EvalJob, Status

FAULT = Path(__file__).resolve().parent / "adversarial" / "faults" / "write_caches.py"
CONFIG = EvalConfig(device="cpu", trials=1, timeout_s=60)
ACTIONS = ("create", "mkdir", "symlink", "append", "replace", "remove", "hardlink")


def source(**constants: str) -> str:
    text = FAULT.read_text()
    for name, value in constants.items():
        text = text.replace(f'{name} = ""', f"{name} = {value!r}", 1)
    return text


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed) with what it holds."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link"
        elif path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[str(path)] = "dir"
    return out


class AuditedPool(LocalPool):
    """The read-only filesystem off in its workers: the write audit is what is left."""

    def _env(self, slot) -> dict:
        return {**super()._env(slot), "KZ_SANDBOX_SKIP": "readonly-fs"}


@pytest.fixture(scope="module", params=["readonly-fs", "write-audit"])
def caches(request, tmp_path_factory, own_workers):
    """A pool whose workers see a home directory holding every cache, each with a file in it already."""
    home, hf_home = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("hf-home")
    with pytest.MonkeyPatch.context() as patch:  # read where the pool starts its workers
        patch.setenv("HOME", str(home))
        patch.setenv("HF_HOME", str(hf_home))
        for variable in ("KZ_CACHE", "XDG_CACHE_HOME", "TRITON_HOME", "TRITON_CACHE_DIR", "HF_HUB_CACHE"):
            patch.delenv(variable, raising=False)
        targets = {
            "problem checks": cache_dir(PROBLEM_CHECKS),
            "converted model": cache_dir("smollm2"),
            "kzcore cache": cache_root(),
            "hugging face": hf_home / "hub",
            "home cache tree": home / ".cache",
            "shared triton cache": home / ".triton" / "cache",
            "home": home,
        }
        for target in targets.values():
            target.mkdir(parents=True, exist_ok=True)
            (target / "existing.json").write_text('{"verdict": "kept"}')
        kind = AuditedPool if request.param == "write-audit" else LocalPool
        with kind(workers=1, config=CONFIG, plugins=["kz_triton"]) as pool:
            fences = pool.info["sandbox"]
            if request.param == "readonly-fs" and fences["filesystem"] != "readonly":
                pytest.skip(f"this machine cannot give workers a read-only filesystem: {fences['filesystem']}")
            assert fences["write_audit"] == ("audit-hook" if request.param == "write-audit" else "off"), fences
            yield pool, home, targets


@pytest.fixture(scope="module")
def relu():
    return next(p for p in load_problems("builtin:1") if p.name == "1_ReLU")


def run(pool, problem, sources: list[str]):
    jobs = [
        EvalJob(problem, Candidate(problem=problem.name, language="triton", level=1, sample=i, source=s), CONFIG)
        for i, s in enumerate(sources)
    ]
    return sorted(pool.map(jobs), key=lambda r: r.sample)


def test_nothing_a_candidate_writes_lands_in_a_cache_kzcore_or_a_policy_reads(caches, relu):
    pool, home, targets = caches
    before = snapshot(home) | {k: v for t in targets.values() for k, v in snapshot(t).items()}
    tried = [(name, action) for name in targets for action in ACTIONS]
    results = run(pool, relu, [source(TARGET=str(targets[name]), ACTION=action) for name, action in tried])
    after = snapshot(home) | {k: v for t in targets.values() for k, v in snapshot(t).items()}
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    for (name, action), result in zip(tried, results, strict=True):
        # refused where it wrote: the candidate fails there, never scored correct
        assert result.status is Status.RUNTIME_ERROR, (name, action, result.status, result.message)
        refused = ("Read-only file system", "may not write outside", "Invalid cross-device link")
        assert any(text in result.message for text in refused), (name, action, result.message)


def test_a_candidates_own_compiler_cache_is_its_workers_and_works(caches, relu):
    pool, _home, _targets = caches
    (result,) = run(pool, relu, [source(ACTION="own-cache")])
    assert result.status is Status.CORRECT, result.message
    (worker,) = pool.start().workers.values()
    landed = list((Path(worker.scratch) / "caches").rglob("own-cache-probe.bin"))
    assert len(landed) == 1 and landed[0].read_bytes() == b"compiled by a candidate"
    assert "triton" in landed[0].relative_to(worker.scratch).parts


def test_a_declared_cache_that_would_expose_a_shared_one_stays_read_only(monkeypatch, tmp_path):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "shared-triton"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "kz"))
    monkeypatch.setenv("KZ_SANDBOX_WRITABLE", str(home / ".cache"))  # an operator's list is held to the rule too
    scratch, own = tmp_path / "scratch", tmp_path / "languages-own-cache"
    declared = [
        home, home / ".cache", tmp_path / "kz", tmp_path / "kz" / PROBLEM_CHECKS, tmp_path / "hf" / "hub",
        home / ".triton", tmp_path / "shared-triton", tmp_path,  # tmp_path holds all of them
        own, tmp_path / "kz" / "cuda-inline",  # a language's own cache, also inside the kzcore cache
    ]  # fmt: skip
    assert cache_fence.writable_paths(scratch, [str(p) for p in declared]) == [
        scratch,
        own,
        tmp_path / "kz" / "cuda-inline",
    ]
    assert len(cache_fence.refused_writable([str(p) for p in declared])) == len(declared) - 2 + 1


def test_the_profile_directory_is_writable_unless_it_exposes_a_shared_cache(monkeypatch, tmp_path):
    """KZ_WORKER_PROFILE=DIR: the worker writes its cProfiles to DIR from inside the sandbox, so DIR is writable,
    held to the same rule as any other asked-for directory."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KZ_CACHE", str(tmp_path / "kz"))
    monkeypatch.delenv("KZ_SANDBOX_WRITABLE", raising=False)
    scratch = tmp_path / "scratch"
    monkeypatch.setenv("KZ_WORKER_PROFILE", str(tmp_path / "prof"))
    assert cache_fence.writable_paths(scratch) == [scratch, tmp_path / "prof"]
    inside = tmp_path / "kz" / PROBLEM_CHECKS / "prof"  # inside kzcore's problem checks
    monkeypatch.setenv("KZ_WORKER_PROFILE", str(inside))
    assert cache_fence.writable_paths(scratch) == [scratch]
    assert [r.split(" ")[0] for r in cache_fence.refused_writable()] == [str(inside)]


def test_a_worker_gets_every_compiler_cache_of_its_own_and_reads_kzcore_where_its_parent_does(monkeypatch, tmp_path):
    monkeypatch.delenv("KZ_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    env = cache_fence.private_caches(tmp_path / "scratch")
    assert env["KZ_CACHE"] == str(tmp_path / "xdg" / "kzcore")  # kzcore's caches stay where the parent has them
    for variable in cache_fence.PRIVATE_CACHES:
        assert Path(env[variable]).is_dir() and Path(env[variable]).is_relative_to(tmp_path / "scratch"), variable
