"""Entries made elsewhere (imported, a bundle directory, another toolchain or GPU model) are
re-proved and re-timed here before they first run, and then stored as this machine's."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from graphs import python_artifact, python_loader

from kernelpro_backend.cache import KernelCache, Toolchain, export_bundle
from kernelpro_backend.cache.artifact import Entry
from kernelpro_backend.cache.entries import describe
from kernelpro_backend.cache.maintenance import Verdict
from kernelpro_backend.options import Options
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.tuner import KernelFinder
from kernelpro_backend.tuner.verify import CacheEntryValidator

OLD = Toolchain("2.11.0+cu130", "3.6.0", "13.0")
H100 = "NVIDIA H100 80GB HBM3"
OK = {"kernel": 0.5, "eager": 2.0, "inductor": 1.0}


class Evaluator:
    """Stands in for the worker pool: answers the kernel and the baselines by name."""

    def __init__(self, ms=None, kernel_status=EvalStatus.OK) -> None:
        self.ms = ms or OK
        self.kernel_status = kernel_status
        self.jobs: list[list] = []

    def __call__(self, jobs):
        self.jobs.append(list(jobs))
        out = []
        for job in jobs:
            name = getattr(job.candidate, "name", "kernel")
            status = self.kernel_status if name == "kernel" else EvalStatus.OK
            out.append(EvalResult(status, median_ms=self.ms[name], message="max error 1e-2"))
        return out


def _made_elsewhere(cache, tanh_sg, **provenance):
    """An entry of the tanh subgraph proved under torch 2.11 (another toolchain)."""
    art = describe(python_artifact(toolchain=OLD), tanh_sg)
    art = dataclasses.replace(art, kernel_ms=0.1, baselines_ms={"inductor": 9.0})
    art = dataclasses.replace(
        art, provenance=dataclasses.replace(art.provenance, **provenance)
    )  # fmt: skip
    key = cache.key_for(tanh_sg.key)
    cache.put(key, art)
    return key


def _prover(cache, evaluate):
    # The test subgraphs are on the CPU: their key's arch is "cpu".
    return CacheEntryValidator(
        evaluate=evaluate, arch="cpu", toolchain=cache.toolchain, gpu=cache.gpu, retime=True
    )


@pytest.fixture
def here(tmp_path):
    with KernelCache(tmp_path / "kp", gpu=H100) as c:
        yield c


def test_an_entry_from_another_toolchain_is_reproved_retimed_stored_and_used(here, tanh_sg):
    key = _made_elsewhere(here, tanh_sg, gpu=H100)
    evaluate = Evaluator()
    finder = KernelFinder(here, Options(), python_loader, prover=_prover(here, evaluate))
    kernel = finder.find(tanh_sg)
    assert kernel is not None
    assert [[getattr(j.candidate, "name", "kernel") for j in b] for b in evaluate.jobs] == [
        ["kernel", "eager", "inductor"]
    ]
    hit = here.lookup(key)
    made = hit.artifact.provenance
    assert hit.unproved is None and made.origin == "reproved"
    assert made.toolchain == here.toolchain and made.gpu == H100
    assert made.tools["made_on"] == f"{H100} with {OLD}"
    # The times are this machine's, not the ones it arrived with.
    assert hit.artifact.kernel_ms == 0.5 and hit.artifact.baselines_ms == {
        "eager": 2.0,
        "inductor": 1.0,
    }
    # A new process finds it proved: no second re-proof.
    again = KernelFinder(here, Options(), python_loader, prover=_prover(here, evaluate))
    assert again.find(tanh_sg) is not None and len(evaluate.jobs) == 1


def test_an_entry_that_fails_its_reproof_never_runs_and_is_recorded(here, tanh_sg, caplog):
    key = _made_elsewhere(here, tanh_sg, gpu="NVIDIA H200")
    evaluate = Evaluator(kernel_status=EvalStatus.WRONG)
    loads = []
    finder = KernelFinder(here, Options(), loads.append, prover=_prover(here, evaluate))
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        assert finder.find(tanh_sg) is None
        assert finder.find(tanh_sg) is None
    assert loads == []  # nothing of it was loaded in this process
    assert len([b for b in evaluate.jobs if len(b) == 3]) == 1  # proved once, not per find
    assert "proved with torch 2.11.0+cu130" in caplog.text and "wrong" in caplog.text
    (miss,) = here.misses.entries()
    assert miss["digest"] == key.digest and "not re-proved here" in miss["reason"]
    assert here.lookup(key).unproved  # left as it was: still not this machine's


def test_a_failed_reproof_is_a_miss_that_on_miss_searches(here, tanh_sg):
    _made_elsewhere(here, tanh_sg, origin="import")
    searched = []

    def searcher(sg):
        searched.append(sg)
        return python_artifact(3)

    finder = KernelFinder(
        here, Options(search="on-miss"), python_loader, searcher,
        prover=lambda entry: Verdict("failed", "compile error"),
    )  # fmt: skip
    assert finder.find(tanh_sg) is not None and searched == [tanh_sg]
    assert here.lookup(here.key_for(tanh_sg.key)).artifact.provenance.origin == "search"


def test_correct_but_not_timed_here_is_not_enough(here, tanh_sg, caplog):
    """The baselines did not run here: the entry is proved correct but not faster here."""

    class NoBaselines(Evaluator):
        def __call__(self, jobs):
            out = super().__call__(jobs)
            return out[:1] + [EvalResult(EvalStatus.COMPILE_ERROR, message="oom") for _ in out[1:]]

    _made_elsewhere(here, tanh_sg)
    finder = KernelFinder(here, Options(), python_loader, prover=_prover(here, NoBaselines()))
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        assert finder.find(tanh_sg) is None
    assert "the baselines did not run here" in caplog.text


@pytest.mark.parametrize("failure", [RuntimeError("no GPU workers"), None])
def test_without_a_working_prover_an_unproved_entry_runs_the_fallback(
    here, tanh_sg, failure, caplog
):
    _made_elsewhere(here, tanh_sg)

    def broken(entry: Entry) -> Verdict:
        raise failure

    prover = broken if failure else None
    finder = KernelFinder(here, Options(), python_loader, prover=prover)
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        assert finder.find(tanh_sg) is None
    assert ("no GPU workers" if failure else "nothing here can re-prove it") in caplog.text


def test_a_bundle_directory_entry_is_reproved_even_from_this_machine(tmp_path, here, tanh_sg):
    """A bundle's provenance is a claim: an entry read from an extra directory is re-proved
    whatever it says, and then lives in the writable store."""
    with KernelCache(tmp_path / "made", gpu=H100) as made:
        made.put(made.key_for(tanh_sg.key), describe(python_artifact(), tanh_sg))
        export_bundle(made, tmp_path / "ship" / "b.tar")
    evaluate = Evaluator()
    with KernelCache(tmp_path / "kp2", extra_dirs=[tmp_path / "ship"], gpu=H100) as cache:
        hit = cache.lookup(cache.key_for(tanh_sg.key))
        assert hit is not None and "b.tar" in (hit.unproved or "")
        finder = KernelFinder(cache, Options(), python_loader, prover=_prover(cache, evaluate))
        assert finder.find(tanh_sg) is not None and len(evaluate.jobs) == 1
        stored = cache.lookup(cache.key_for(tanh_sg.key))
        assert stored.source == str(cache.directory) and stored.unproved is None


def test_the_reprover_shares_the_search_pool_or_keeps_a_small_one():
    from kernelpro_backend.tuner.reprove import REPROVE_WORKERS, Reprover

    assert Reprover(Options(search="on-miss", workers=8)).workers == 8  # one pool for both
    assert Reprover(Options(search="cache-only", workers=8)).workers == REPROVE_WORKERS
    assert Reprover(Options(search="cache-only", workers=1)).workers == 1


def test_an_energy_entry_made_on_another_gpu_loses_its_joules_when_reproved(here, tanh_sg):
    """Joules read on another GPU model say nothing of this one's, and the re-proof times but
    does not read joules: the entry keeps its rule and its new times, not the old joules, so
    under "energy" it runs only where it clears the time rule here."""
    key = _made_elsewhere(here, tanh_sg, gpu="NVIDIA H200")
    art = dataclasses.replace(
        here.get(key), objective="energy", kernel_j=0.115, baselines_j={"inductor": 0.151}
    )
    here.put(key, art)
    slower = {"kernel": 1.001, "eager": 2.0, "inductor": 1.0}  # 0.1% slower than Inductor here
    finder = KernelFinder(
        here, Options(objective="energy"), python_loader, prover=_prover(here, Evaluator(slower))
    )
    assert finder.find(tanh_sg) is None
    stored = here.lookup(key).artifact
    assert stored.objective == "energy" and stored.kernel_ms == 1.001
    assert stored.kernel_j is None and stored.baselines_j == {}
