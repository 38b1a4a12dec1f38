"""Stage-2 feedback inside real workers on the GPU: a codegen spec evaluated through the
WorkerPool as a search evaluates it comes back with ptxas and sass findings read from its
compiled Triton kernel; ncu profiles it in a child that rebuilds the candidate from its data;
a CUDA candidate's cubin goes to the SASS tool."""

import dataclasses

import pytest
import torch
from cuda_sources import VECTOR_ADD
from runtime_helpers import subgraphs_of

from kernelpro_backend.profilers import Roofs
from kernelpro_backend.profilers.ncu import find_ncu
from kernelpro_backend.runtime import Job, SourceCandidate, WorkerPool
from kernelpro_backend.runtime.feedback import FeedbackPlan
from kernelpro_backend.search import codegen_space

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
# H100 roofs (GPU.md); 2048x4096 float32 x*y+1 moves 100 MB: ~33 us of SOL, far above the
# launch latency, so the class is memory-bound or under-utilised and sass is called for.
ROOFS = Roofs(bytes_per_s=3.0e12, flops_per_s=67e12)


@pytest.fixture(scope="module", autouse=True)
def _gpu_env(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.delenv("TRITON_INTERPRET", raising=False)  # workers compile real Triton kernels
    mp.setenv("KERNELPRO_CUBIN_DIR", str(tmp_path_factory.mktemp("cubins")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def pool(_gpu_env):
    with WorkerPool(workers=1, timeout_s=360) as p:  # ncu replays the kernel: ~20-60 s
        yield p


@pytest.fixture(scope="module")
def pointwise():
    torch._dynamo.reset()
    x, y = (torch.randn(2048, 4096, device="cuda") for _ in range(2))
    (sg,) = subgraphs_of(lambda x, y: torch.relu(x * y + 1.0), x, y)
    return sg


def spec_job(subgraph, plan):
    spec = codegen_space().initial(subgraph)[0]
    return Job.from_subgraph(subgraph, spec, feedback=plan)


def test_ptxas_and_sass_read_the_compiled_spec_kernel(pool, pointwise):
    result = pool.evaluate(spec_job(pointwise, FeedbackPlan(ROOFS, ("ptxas", "sass"))))
    assert result.ok, result.message
    assert result.details["tools_run"] == ["ptxas", "sass"], result.details["tools_skipped"]
    tools = [f.tool for f in result.findings]
    assert tools[:2] == ["roofline", "roofline"]
    assert "ptxas" in tools and "sass" in tools
    registers = [f for f in result.findings if f.metric == "registers_per_thread"]
    assert registers and 0 < registers[0].value <= 255
    assert [f for f in result.findings if f.metric == "instruction_mix"]


def test_ncu_profiles_the_candidate_rebuilt_from_its_data(pool, pointwise):
    result = pool.evaluate(spec_job(pointwise, FeedbackPlan(ROOFS, ("ncu",), ncu_below_ms=None)))
    assert result.ok, result.message
    skipped = dict(result.details["tools_skipped"])
    if find_ncu() is None:
        assert skipped["ncu"] == "ncu is not on PATH"
        return
    assert result.details["tools_run"] == ["ncu"], skipped
    assert [f for f in result.findings if f.tool == "ncu"]


def test_ncu_skips_a_candidate_slower_than_the_best(pool, pointwise):
    plan = FeedbackPlan(ROOFS, ("ncu",), ncu_below_ms=1e-6)
    result = pool.evaluate(spec_job(pointwise, plan))
    assert result.ok and result.details["tools_run"] == []
    assert "not faster than the best so far" in dict(result.details["tools_skipped"])["ncu"]


def test_a_cuda_candidate_hands_its_cubin_to_sass(pool):
    torch._dynamo.reset()
    x, y = (torch.randn(2048, 4096, device="cuda") for _ in range(2))
    (sg,) = subgraphs_of(lambda x, y: x + y, x, y)
    job = Job.from_subgraph(sg, SourceCandidate("cuda", VECTOR_ADD, "vector_add"))
    result = pool.evaluate(dataclasses.replace(job, feedback=FeedbackPlan(ROOFS)))
    assert result.ok, result.message
    assert result.details["tools_run"] == ["sass"], result.details["tools_skipped"]
    assert "no ptxas report" in dict(result.details["tools_skipped"])["ptxas"]
    assert [f for f in result.findings if f.tool == "sass"]
