"""`kernelpro cache verify`: re-proving entries with the real evaluator on CPU, and the
validator's logic with a fake evaluator."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch
from graphs import TANH_SOURCE, python_artifact, tanh_subgraph, with_arch
from helpers import run_cache_cli

from kernelpro_backend.cache import (
    Entry,
    KernelCache,
    describe,
    verify,
)
from kernelpro_backend.runtime import EvalResult, EvalStatus, SourceCandidate, SpecCandidate
from kernelpro_backend.tuner import artifact_candidate
from kernelpro_backend.tuner.verify import CacheEntryValidator

WRONG_SOURCE = TANH_SOURCE.replace("+ 1.0", "+ 1.001")  # off by 1e-3: far outside float32 tol


def _put(cache, sg, artifact, arch=None):
    key = cache.key_for(sg.key)
    if arch:
        key = with_arch(key, arch)
    cache.put(key, describe(artifact, sg))
    return key


@pytest.fixture
def mixed_cache(tmp_path, tanh_sg):
    """A correct entry, a wrong one (another shape of the same subgraph), and one for sm_90."""
    other_shape = tanh_subgraph(shape=(4, 16))
    with KernelCache(tmp_path / "c") as cache:
        good = _put(cache, tanh_sg, python_artifact(0))
        bad = _put(cache, other_shape, dataclasses.replace(python_artifact(1), source=WRONG_SOURCE))
        foreign = _put(cache, tanh_sg, python_artifact(2), arch="sm_90")
        yield str(tmp_path / "c"), cache, good, bad, foreign


def test_verify_with_the_real_evaluator_keeps_a_correct_entry_and_drops_a_wrong_one(mixed_cache):
    path, cache, good, bad, foreign = mixed_cache
    with CacheEntryValidator(arch="cpu", seed=11) as validator:
        code, text = run_cache_cli("--cache-dir", path, "verify", "--dry-run", validator=validator)
        assert code == 1, text
        assert "would drop 1" in text and "kept 1" in text and "skipped 1" in text
        assert cache.get(bad) is not None  # dry run: nothing deleted
        code, text = run_cache_cli("--cache-dir", path, "verify", validator=validator)
    assert code == 1 and "kept 1, dropped 1, skipped 1" in text, text
    lines = {line.split()[0]: line for line in text.splitlines() if line[:12] in
             (good.digest[:12], bad.digest[:12], foreign.digest[:12])}  # fmt: skip
    assert "kept" in lines[good.digest[:12]] and "validated" in lines[good.digest[:12]]
    assert "dropped" in lines[bad.digest[:12]] and "wrong" in lines[bad.digest[:12]]
    assert "(seed 11)" in lines[bad.digest[:12]]
    assert "skipped" in lines[foreign.digest[:12]] and "built for sm_90" in text
    assert cache.get(good) is not None and cache.get(foreign) is not None
    assert cache.get(bad) is None


def test_verify_a_codegen_triton_entry_with_the_default_loader(tmp_path, tanh_sg):
    """A KernelSpec artifact loads through tuner.load_artifact and runs in the worker (Triton's
    interpreter on CPU); the spec of `tanh*3+2` stored under `tanh*3+1` is proved wrong."""
    from graphs import trace

    from kernelpro_backend.cache import KernelArtifact
    from kernelpro_backend.codegen import render
    from kernelpro_backend.lowering import lower

    (shifted,) = trace(lambda x: torch.tanh(x) * 3.0 + 2.0, torch.randn(8, 32))

    def spec_artifact(sg):
        spec = lower(sg)
        r = render(spec)
        return KernelArtifact(r.language, r.source, r.entry, spec_json=spec.to_json())

    with KernelCache(tmp_path / "c") as cache:
        good = _put(cache, tanh_sg, spec_artifact(tanh_sg))
        precise = dataclasses.replace(tanh_sg.key, precision="tf32")  # a second key, same text
        bad = cache.key_for(precise)
        cache.put(bad, describe(spec_artifact(shifted), tanh_sg))
        with CacheEntryValidator(arch=good.arch, seed=3) as validator:
            report = verify(cache, validator)
    assert report.kept == 1 and [d.digest for d in report.dropped] == [bad.digest]
    assert "wrong" in report.dropped[0].reason
    (row,) = [c for c in report.checked if c.digest == good.digest]
    assert row.measured_ms is not None and row.measured_ms > 0


# -- the validator's logic, with a fake evaluator ---------------------------------------------


OK = EvalResult(EvalStatus.OK, median_ms=0.5, message="ok")


class FakeEvaluator:
    """Answers each job by its candidate: the kernel, or the eager/inductor baseline."""

    def __init__(self, kernel=OK, eager=OK, inductor=OK) -> None:
        self.answers = {"kernel": kernel, "eager": eager, "inductor": inductor}
        self.jobs: list = []

    def __call__(self, jobs):
        self.jobs.append(list(jobs))
        return [self.answers[getattr(j.candidate, "name", "kernel")] for j in jobs]


def _entry(cache, key):
    return next(e for e in cache.entries() if e.key == key)


def test_the_job_holds_the_rebuilt_reference_and_fresh_inputs(cache, tanh_sg):
    key = _put(cache, tanh_sg, python_artifact(0))
    fake = FakeEvaluator()
    validator = CacheEntryValidator(evaluate=fake, arch=key.arch, seed=42)
    verdict = validator(_entry(cache, key))
    assert verdict.status == "ok" and verdict.measured_ms == 0.5
    ((job,),) = fake.jobs
    assert job.seed == 42 and job.input_meta == tuple(tanh_sg.input_meta)
    assert job.output_meta == tuple(tanh_sg.output_meta)
    assert job.candidate == SourceCandidate("triton", TANH_SOURCE, "scaled_tanh")
    x = tanh_sg.make_inputs(1)[0]
    (got,) = pickle.loads(job.reference)(x)
    assert torch.equal(got, tanh_sg.module()(x)[0])


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda key, a: (with_arch(key, "sm_90"), a), ("skipped", "built for sm_90")),
        (lambda key, a: (key, dataclasses.replace(a, subgraph_text="")), ("failed", "no subgraph")),
        (lambda key, a: (key, dataclasses.replace(a, language="cuda")), ("failed", "not load")),
    ],
)
def test_entries_that_cannot_be_checked_here(cache, tanh_sg, change, expected):
    key, artifact = change(cache.key_for(tanh_sg.key), describe(python_artifact(0), tanh_sg))
    entry = Entry(key, artifact, sha256="")
    fake = FakeEvaluator()
    verdict = CacheEntryValidator(evaluate=fake, arch="cpu")(entry)
    assert (verdict.status, expected[1] in verdict.reason) == (expected[0], True), verdict
    assert fake.jobs == []  # nothing was run


WRONG = EvalResult(EvalStatus.WRONG, message="output 0: max error 1e-3 > tol")


def test_a_rejected_kernel_fails_with_the_evaluators_message(cache, tanh_sg):
    key = _put(cache, tanh_sg, python_artifact(0))
    fake = FakeEvaluator(kernel=WRONG)
    validator = CacheEntryValidator(evaluate=fake, arch=key.arch, seed=9)
    verdict = validator(_entry(cache, key))
    assert verdict.status == "failed"
    assert verdict.reason == "wrong: output 0: max error 1e-3 > tol (seed 9)"
    assert [j.candidate.describe()["kind"] for jobs in fake.jobs for j in jobs] == [
        "source", "baseline"
    ]  # fmt: skip


def test_when_the_eager_reference_fails_too_verify_stops_and_drops_nothing(cache, tanh_sg):
    key = _put(cache, tanh_sg, python_artifact(0))
    broken = EvalResult(EvalStatus.CRASHED, message="CUDA error: no device")
    fake = FakeEvaluator(kernel=WRONG, eager=broken)
    validator = CacheEntryValidator(evaluate=fake, arch=key.arch)
    code, text = run_cache_cli("--cache-dir", str(cache.directory), "verify", validator=validator)
    assert code == 2 and "verify stopped" in text and "CUDA error: no device" in text
    assert cache.get(key) is not None


def test_retime_updates_times_unless_dry_run(cache, tanh_sg):
    key = _put(cache, tanh_sg, python_artifact(0))
    eager = EvalResult(EvalStatus.OK, median_ms=0.4)
    inductor = EvalResult(EvalStatus.COMPILE_ERROR, message="no compiler")
    fake = FakeEvaluator(OK, eager=eager, inductor=inductor)
    validator = CacheEntryValidator(evaluate=fake, arch=key.arch, retime=True)
    report = verify(cache, validator, dry_run=True)
    assert cache.get(key).kernel_ms == python_artifact(0).kernel_ms  # unchanged
    assert "now slower than eager (0.5 vs 0.4 ms)" in report.checked[0].reason
    verify(cache, validator)
    stored = cache.get(key)
    assert stored.kernel_ms == 0.5 and stored.baselines_ms == {"eager": 0.4}
    assert [j.candidate.describe()["kind"] for j in fake.jobs[-1]] == [
        "source", "baseline", "baseline"
    ]  # fmt: skip


def test_artifact_candidate_prefers_the_spec_with_the_stored_source():
    """verify proves the bytes a hit runs: the stored source, not today's rendering."""
    a = python_artifact(0)
    candidate = artifact_candidate(dataclasses.replace(a, spec_json="{}"))
    assert candidate == SpecCandidate("{}", a.source, a.entry)
    assert isinstance(artifact_candidate(a), SourceCandidate)
    with pytest.raises(ValueError, match="cannot run cuda"):
        artifact_candidate(dataclasses.replace(a, language="cuda"))


def test_corrupt_entries_are_dropped_and_reported(cache):
    cache.put_raw("e" * 64, b"not json")
    code, text = run_cache_cli("--cache-dir", str(cache.directory), "verify", "--integrity-only")
    assert code == 1 and "corrupt" in text and "dropped 1" in text
    assert cache.raw("e" * 64) is None


def test_a_cuda_entry_is_proved_from_its_stored_cubin(cache, tanh_sg):
    """The worker gets the entry's cubin, the bytes a hit loads, not its source to compile."""
    art = dataclasses.replace(
        describe(python_artifact(0), tanh_sg),
        language="cuda", binary=b"\x7fELF-cubin", launch={"arch": "sm_90"},
    )  # fmt: skip
    key = _put(cache, tanh_sg, art)
    fake = FakeEvaluator()
    assert CacheEntryValidator(evaluate=fake, arch=key.arch)(_entry(cache, key)).status == "ok"
    ((job,),) = fake.jobs
    assert job.candidate.cubin == b"\x7fELF-cubin" and job.candidate.arch == "sm_90"
