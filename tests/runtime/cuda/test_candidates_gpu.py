"""CUDA candidates on the GPU: correct kernels evaluate ok through the WorkerPool; a faulting and
a hanging kernel come back crashed / timed_out and the pool carries on; the driver-API kernel
runs under CUDA-graph capture and with >48 KiB of shared memory; a cached cubin loads and runs
with no compiler anywhere."""

import dataclasses

import pytest
import torch
from cuda_sources import (
    BIG_SMEM_ADD,
    CUTE_SCALE,
    ENDLESS_LOOP,
    OUT_OF_BOUNDS_WRITE,
    ROW_SOFTMAX,
    VECTOR_ADD,
    WRONG_ARG_TYPE,
)
from runtime_helpers import subgraphs_of

from kernelpro_backend.cache import KernelArtifact, KernelCache, cache_key
from kernelpro_backend.runtime import EvalStatus, Job, SourceCandidate, WorkerPool
from kernelpro_backend.runtime.candidate import load_kernel
from kernelpro_backend.runtime.cuda import compile as cuda_compile
from kernelpro_backend.runtime.cuda import driver as cuda_driver
from kernelpro_backend.runtime.cuda.compile import compile_cuda, cutlass_include_dirs, nvrtc_version
from kernelpro_backend.runtime.cuda.driver import CudaKernel, current_arch, load_cuda_source
from kernelpro_backend.runtime.cuda.source import parse_launch
from kernelpro_backend.tuner import load_artifact, winner_fields
from kernelpro_backend.tuner.artifacts import artifact_candidate

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module", autouse=True)
def _gpu_env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.delenv("TRITON_INTERPRET", raising=False)
    mp.setenv("KERNELPRO_CUBIN_DIR", str(tmp_path_factory.mktemp("cubins")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def add_subgraph():
    torch._dynamo.reset()
    x, y = (torch.randn(1000, 1027, device="cuda") for _ in range(2))
    (sg,) = subgraphs_of(lambda x, y: x + y, x, y)
    return sg


@pytest.fixture(scope="module")
def softmax_gpu_subgraph():
    torch._dynamo.reset()
    (sg,) = subgraphs_of(lambda x: torch.softmax(x, -1), torch.randn(512, 1000, device="cuda"))
    return sg


@pytest.fixture(scope="module")
def pool(_gpu_env):
    with WorkerPool(workers=2, timeout_s=30) as p:
        yield p


def cuda_job(subgraph, source, entry):
    return Job.from_subgraph(subgraph, SourceCandidate("cuda", source, entry))


def test_vector_add_and_row_softmax_evaluate_ok(pool, add_subgraph, softmax_gpu_subgraph):
    add, softmax = pool.evaluate_many(
        [
            cuda_job(add_subgraph, VECTOR_ADD, "vector_add"),
            cuda_job(softmax_gpu_subgraph, ROW_SOFTMAX, "row_softmax"),
        ]
    )
    assert add.ok, add.message
    assert softmax.ok, softmax.message
    assert add.median_ms > 0 and 0 < add.sol_fraction <= 1


def test_wrong_parameter_layout_is_a_compile_error(pool, add_subgraph):
    result = pool.evaluate(cuda_job(add_subgraph, WRONG_ARG_TYPE, "vector_add"))
    assert result.status is EvalStatus.COMPILE_ERROR, result.message
    assert "parameters" in result.message and not result.details["fatal"]


@pytest.mark.parametrize(
    "source, entry, status",
    [(OUT_OF_BOUNDS_WRITE, "oob", "crashed"), (ENDLESS_LOOP, "spin", "timed_out")],
    ids=["out_of_bounds_write", "endless_loop"],
)
def test_fault_or_hang_leaves_the_pool_serving(pool, add_subgraph, source, entry, status):
    bad, *good = pool.evaluate_many(
        [cuda_job(add_subgraph, source, entry)]
        + [cuda_job(add_subgraph, VECTOR_ADD, "vector_add")] * 2
    )
    assert bad.status.value == status, bad.message
    assert all(r.ok for r in good), [r.message for r in good]
    torch.cuda.synchronize()  # the parent's context is unharmed
    assert pool.evaluate(cuda_job(add_subgraph, VECTOR_ADD, "vector_add")).ok


def test_driver_kernel_is_captured_by_cuda_graphs():
    kernel = load_cuda_source(VECTOR_ADD, "vector_add")
    x, y = (torch.randn(3, 1001, device="cuda") for _ in range(2))
    (out,) = kernel(x, y)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (captured,) = kernel(x, y)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, x + y, rtol=0, atol=0)


def test_large_dynamic_shared_memory_is_opted_in():
    kernel = load_cuda_source(BIG_SMEM_ADD, "big_smem_add")
    x, y = (torch.randn(70_001, device="cuda") for _ in range(2))
    (out,) = kernel(x, y)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)


@pytest.mark.skipif(not cutlass_include_dirs(), reason="CUTLASS headers (nvidia-cutlass) absent")
def test_cute_kernel_runs():
    x = torch.randn(1000, device="cuda")
    (out,) = load_cuda_source(CUTE_SCALE, "cute_scale")(x)
    torch.testing.assert_close(out, 2 * x, rtol=0, atol=0)


def test_nvrtc_cubin_runs_like_the_nvcc_one(tmp_path):
    if nvrtc_version() is None:
        pytest.skip("NVRTC (libnvrtc) is not installed here")
    cubin = compile_cuda(ROW_SOFTMAX, current_arch(), compiler="nvrtc", cubin_dir=tmp_path)
    assert cubin.compiler.startswith("nvrtc")
    kernel = CudaKernel(cubin.data, parse_launch(ROW_SOFTMAX, "row_softmax"))
    x = torch.randn(33, 777, device="cuda")
    (out,) = kernel(x)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_cached_cubin_loads_and_runs_without_any_compiler(
    monkeypatch, tmp_path, softmax_gpu_subgraph
):
    fields = winner_fields(SourceCandidate("cuda", ROW_SOFTMAX, "row_softmax"), render=None)
    key = cache_key(softmax_gpu_subgraph.key)
    with KernelCache(tmp_path / "kp") as cache:
        cache.put(key, KernelArtifact(**fields, kernel_ms=0.01))
        stored = cache.get(key)
    assert stored is not None and stored.binary == fields["binary"]

    def no_compiler(*args, **kwargs):
        raise AssertionError("a cache hit must not compile")

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(cuda_compile, "compile_cuda", no_compiler)
    monkeypatch.setattr(cuda_driver, "compile_cuda", no_compiler)
    assert cuda_compile.find_nvcc() is None
    kernel = load_artifact(stored)
    x = torch.randn(512, 1000, device="cuda")
    (out,) = kernel(x)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    # The evaluator's form of the entry (what a re-proof runs in the worker) loads the same
    # stored cubin, not a fresh compile of the source: garbage bytes fail to load.
    proved = load_kernel(artifact_candidate(stored), torch.nn.Identity(), tmp_path)
    torch.testing.assert_close(proved(x)[0], torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    garbage = dataclasses.replace(stored, binary=b"\x7fELF" + b"\0" * 64)
    with pytest.raises(Exception):  # noqa: B017 - the driver's error type varies
        load_kernel(artifact_candidate(garbage), torch.nn.Identity(), tmp_path)(x)
