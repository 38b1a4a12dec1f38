"""CUTLASS libraries built in the background (tuner/cutlass_builds.py), and the search proposing
only the configurations whose library is built (search/space.py `ready`), with a fake nvcc."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest
import torch
import torch.nn.functional as F
from harness import traced_subgraph

from kernelpro_backend.codegen.cutlass_match import cutlass_gemm, cutlass_specs
from kernelpro_backend.lowering import lower
from kernelpro_backend.search.space import codegen_space
from kernelpro_backend.tuner.cutlass_builds import CutlassBuilds


def _gelu_subgraph():  # type: ignore[no-untyped-def]
    x, w = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(128, 32, dtype=torch.bfloat16)
    b = torch.randn(128, dtype=torch.bfloat16)
    fn = lambda b, a, c: (F.gelu(torch.addmm(b, a, c)),)  # noqa: E731
    return traced_subgraph(fn, (b, x, w.t()), "gemm")


class _FakeNvcc:
    """Builds instantly, or waits for `release`; records what it built."""

    def __init__(self, fail: bool = False, hold: bool = False) -> None:
        self.built: set[str] = set()
        self.calls: list[str] = []
        self.fail = fail
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def build(self, source, arch, library_dir):  # type: ignore[no-untyped-def]
        assert arch == "sm_90a"
        self.calls.append(source)
        self.release.wait(10)
        if self.fail:
            raise RuntimeError("nvcc: error: no such template")
        self.built.add(source)

    def is_built(self, source, arch, library_dir):  # type: ignore[no-untyped-def]
        return source in self.built


class RecordingBuilds:
    """A searcher's builder that records what it is asked and says builds are in flight."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def start(self, seed):  # type: ignore[no-untyped-def]
        self.calls.append(("start", seed.template))

    def building(self, seed):  # type: ignore[no-untyped-def]
        return 2

    def wait(self, timeout_s, seed):  # type: ignore[no-untyped-def]
        self.calls.append(("wait", timeout_s))


def _builds(nvcc: _FakeNvcc, jobs: int = 2, arch: str | None = "sm_90a") -> CutlassBuilds:
    return CutlassBuilds(
        None, jobs, arch=lambda: arch, toolchain=lambda: None, build=nvcc.build,
        built=nvcc.is_built,
    )  # fmt: skip


def test_builds_each_configuration_once_and_specs_become_ready() -> None:
    nvcc = _FakeNvcc(hold=True)
    builds = _builds(nvcc)
    seed = lower(_gelu_subgraph())
    specs = cutlass_specs(seed)
    assert builds.start(seed) == 8  # 12 combinations, less ping-pong x 256 (it spills) and
    # stream-K x cluster 2 (not built)
    assert builds.start(seed) == 0  # queued already: not twice
    assert not any(builds.ready(s) for s in specs)  # still building
    assert builds.ready(seed)  # not a CUTLASS spec: always measurable
    nvcc.release.set()
    assert builds.wait(10)
    assert sorted(nvcc.calls) == sorted({cutlass_gemm(s).source_text() for s in specs})
    assert all(builds.ready(s) for s in specs)
    assert builds.start(seed) == 0  # built: nothing to queue


@pytest.mark.parametrize(
    "jobs, arch, why", [(0, "sm_90a", "cutlass_jobs is 0"), (2, None, "sm_90 (Hopper)")]
)
def test_nothing_is_built_or_ready_where_it_cannot_run(jobs, arch, why) -> None:  # type: ignore[no-untyped-def]
    nvcc = _FakeNvcc()
    builds = _builds(nvcc, jobs=jobs, arch=arch)
    seed = lower(_gelu_subgraph())
    assert builds.start(seed) == 0 and nvcc.calls == []
    assert builds.unavailable is not None and why in builds.unavailable
    assert not builds.ready(cutlass_specs(seed)[0])


def test_a_failed_build_is_logged_and_never_ready(caplog: pytest.LogCaptureFixture) -> None:
    nvcc = _FakeNvcc(fail=True)
    builds = _builds(nvcc)
    seed = lower(_gelu_subgraph())
    with caplog.at_level(logging.WARNING, logger="kernelpro.cutlass"):
        builds.start(seed)
        assert builds.wait(10)
    assert len(builds.failed) == 8 and "no such template" in next(iter(builds.failed.values()))
    assert "failed to build" in caplog.text
    assert not builds.ready(cutlass_specs(seed)[0])


def test_the_search_proposes_only_built_libraries() -> None:
    sg = _gelu_subgraph()
    nvcc = _FakeNvcc()
    builds = _builds(nvcc)
    space = codegen_space(builds.ready)
    assert all(getattr(c, "template", "") != "gemm_cutlass" for c in space.initial(sg))
    first = cutlass_specs(lower(sg))[0]
    nvcc.built.add(cutlass_gemm(first).source_text())  # the default configuration is built
    initial = space.initial(sg)
    assert first in initial
    with pytest.raises(space.illegal, match="not built yet"):
        space.with_knobs(first, SCHEDULE="cooperative")
    nvcc.built.add(cutlass_gemm(first.with_knobs(SCHEDULE="cooperative")).source_text())
    moved = space.with_knobs(first, SCHEDULE="cooperative")
    assert dict(moved.knobs)["SCHEDULE"] == "cooperative"
    # without a readiness rule (tests, CPU tools) every legal spec is proposed
    assert first in codegen_space().initial(sg)


def test_build_now_waits_for_the_given_specs_only() -> None:
    nvcc = _FakeNvcc()
    builds = _builds(nvcc)
    spec = cutlass_specs(lower(_gelu_subgraph()))[5]
    assert builds.build([spec], timeout_s=10)
    assert nvcc.calls == [cutlass_gemm(spec).source_text()]
    assert builds.build([spec], timeout_s=10) and len(nvcc.calls) == 1  # built: not again
    assert not _builds(_FakeNvcc(), arch=None).build([spec])  # no Hopper GPU: nothing


def test_a_cutlass_entry_is_built_before_its_reproof(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The validator builds the library in its own process (minutes of nvcc outside the
    job's timeout) before the worker proves the entry; other entries build nothing."""
    from kernelpro_backend.cache.artifact import KernelArtifact
    from kernelpro_backend.tuner import verify

    built: list = []

    class Recorder:
        def __init__(self, library_dir, jobs) -> None:  # type: ignore[no-untyped-def]
            self.library_dir = library_dir

        def build(self, specs):  # type: ignore[no-untyped-def]
            built.extend((self.library_dir, s) for s in specs)
            return True

    monkeypatch.setattr(verify, "CutlassBuilds", Recorder)
    validator = verify.CacheEntryValidator(evaluate=lambda jobs: [], arch="sm_90a")
    seed = lower(_gelu_subgraph())
    spec = cutlass_specs(seed)[2]
    validator._build_library(KernelArtifact("triton", "", "entry", seed.to_json()))
    assert built == []
    validator._build_library(KernelArtifact("triton", "", "entry", spec.to_json()))
    assert [s for _, s in built] == [spec]
    assert built[0][0] == validator.setup.layout.cubin_root


def test_waiting_for_one_gemms_builds_only() -> None:
    nvcc = _FakeNvcc(hold=True)
    builds = _builds(nvcc, jobs=8)
    seed = lower(_gelu_subgraph())
    builds.start(seed)
    assert builds.building(seed) == 8 and builds.running() == 8
    assert not builds.wait(0.05, seed)  # still building
    nvcc.release.set()
    assert builds.wait(10, seed) and builds.building(seed) == 0 and builds.running() == 0


def test_a_gemm_search_waits_for_its_builds_and_a_graph_queues_them_first(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The finder hands a graph's subgraphs to the searcher before the first search (their
    builds start); a GEMM's search waits up to two budgets for its own libraries."""
    from kernelpro_backend.options import Options
    from kernelpro_backend.tuner.finder import KernelFinder
    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    sg = dataclasses.replace(_gelu_subgraph(), device=torch.device("cuda"))
    searcher = SubgraphSearcher(Options(search="on-miss", progress=False))
    calls: list = []
    searcher.cutlass = RecordingBuilds(calls)  # type: ignore[assignment]
    searcher._await_builds(sg, 30.0)
    assert calls == [("start", "gemm"), ("wait", 60.0)]
    calls.clear()
    finder = KernelFinder(None, Options(search="on-miss"), searcher=searcher)  # type: ignore[arg-type]
    finder.prepare([sg])
    assert calls == [("start", "gemm")]
    calls.clear()
    KernelFinder(None, Options(search="cache-only"), searcher=searcher).prepare([sg])  # type: ignore[arg-type]
    assert calls == []


def test_a_failure_while_queueing_builds_never_breaks_the_compile(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """The finder's prepare runs outside any search's guard: a lowering bug is logged."""
    from kernelpro_backend.options import Options
    from kernelpro_backend.tuner import searcher as searcher_module
    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    def broken(subgraph):  # type: ignore[no-untyped-def]
        raise KeyError("a lowering bug")

    monkeypatch.setattr(searcher_module, "lower", broken)
    sg = dataclasses.replace(_gelu_subgraph(), device=torch.device("cuda"))
    with caplog.at_level(logging.ERROR, logger="kernelpro"):
        SubgraphSearcher(Options(search="on-miss", progress=False)).queue_builds([sg])
    assert "queueing CUTLASS builds" in caplog.text
