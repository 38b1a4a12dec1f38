"""On the GPU: the whole gaming corpus is rejected, a faulting or hanging kernel leaves the
parent and the other worker healthy, and timing the same kernel twice agrees."""

import pytest
import torch
from gaming_corpus import CASES, CUDA_CRASHES, HONEST
from runtime_helpers import subgraphs_of

from kernelpro_backend.runtime import EvalStatus, Job, SourceCandidate, WorkerPool, faster
from kernelpro_backend.runtime.timing import LAUNCH_BOUND_MS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _pointwise(x, y):
    return torch.relu(x * y + 1.0)


@pytest.fixture(scope="module")
def cuda_subgraph():
    torch._dynamo.reset()
    x, y = (torch.randn(2048, 4096, device="cuda") for _ in range(2))
    (sg,) = subgraphs_of(_pointwise, x, y)
    return sg


@pytest.fixture(scope="module")
def gpu_pool():
    # Workers compile real Triton kernels: start them without the interpreter flag.
    mp = pytest.MonkeyPatch()
    mp.delenv("TRITON_INTERPRET", raising=False)
    try:
        with WorkerPool(workers=2, timeout_s=45) as pool:
            yield pool
    finally:
        mp.undo()


def job(subgraph, text):
    return Job.from_subgraph(subgraph, SourceCandidate("triton", text, "entry"))


def test_honest_kernel_is_ok_below_speed_of_light(gpu_pool, cuda_subgraph):
    result = gpu_pool.evaluate(job(cuda_subgraph, HONEST))
    assert result.ok, result.message
    assert result.sol_ms is not None and 0 < result.sol_fraction <= 1
    # Launch-bound kernels are timed by CUDA-graph replay, longer ones with events.
    expected = "cuda_graph" if result.median_ms < LAUNCH_BOUND_MS else "events"
    assert result.details["timing_method"] == expected


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gaming_case_is_rejected_on_cuda(case, gpu_pool, cuda_subgraph):
    result = gpu_pool.evaluate(job(cuda_subgraph, case.source))
    assert result.status.value == case.status, result.message
    assert case.rejected_for_reason(result.message), result.message


@pytest.mark.parametrize("name", sorted(CUDA_CRASHES))
def test_fault_or_hang_leaves_parent_and_other_worker_healthy(name, gpu_pool, cuda_subgraph):
    text, status = CUDA_CRASHES[name]
    results = gpu_pool.evaluate_many(
        [job(cuda_subgraph, text), job(cuda_subgraph, HONEST), job(cuda_subgraph, HONEST)]
    )
    assert results[0].status.value == status, results[0].message
    assert all(r.ok for r in results[1:]), [r.message for r in results[1:]]
    torch.cuda.synchronize()  # the parent's own context is unharmed
    assert gpu_pool.evaluate(job(cuda_subgraph, HONEST)).ok


def test_timing_twice_agrees_within_spread(gpu_pool, cuda_subgraph):
    first, second = (gpu_pool.evaluate(job(cuda_subgraph, HONEST)) for _ in range(2))
    assert first.ok and second.ok
    assert faster(first, second) is None, (first.median_ms, first.spread_ms, second.median_ms)


def test_baselines_are_timed(gpu_pool, cuda_subgraph):
    eager, inductor = gpu_pool.evaluate_many(job(cuda_subgraph, HONEST).baselines())
    assert eager.status is EvalStatus.OK and inductor.status is EvalStatus.OK
