"""On a Hopper GPU: the "gemm_cutlass" spec of a real graph's GEMM (bias + erf GELU as
Inductor's decompositions spell it; bias + residual; bias + swish x 2, compiled into a custom
functor) built in the background builder, run through its module (kernelpro::cutlass_gemm) and
checked as the search checks a candidate."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import collect

from kernelpro_backend.codegen.build import SpecKernel
from kernelpro_backend.codegen.cutlass_match import cutlass_specs
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.compare import compare
from kernelpro_backend.runtime.cuda import host as cuda_host
from kernelpro_backend.runtime.cuda.compile import cutlass_include_dirs, find_nvcc
from kernelpro_backend.runtime.validate import compute_reference
from kernelpro_backend.tuner.cutlass_builds import CutlassBuilds

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="needs an sm_90 GPU",
    ),
    pytest.mark.skipif(
        find_nvcc() is None or not cutlass_include_dirs(), reason="needs nvcc and CUTLASS"
    ),
]


EPILOGUES = {
    "gelu": lambda y, r: F.gelu(y),
    "residual": lambda y, r: y + r,
    "swish_scale": lambda y, r: y * torch.sigmoid(y) * 2.0,  # compiled into a functor
}


class _Linear(torch.nn.Module):
    def __init__(self, k: int, n: int, epilogue: str) -> None:
        super().__init__()
        self.linear, self.epilogue = torch.nn.Linear(k, n), EPILOGUES[epilogue]

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.epilogue(self.linear(x), r)


def _spec(epilogue: str, lead: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """The model's GEMM subgraph (M = 1000 rows in all, K 512, N 768) and its first CUTLASS
    spec."""
    k, n = 512, 768
    model = _Linear(k, n, epilogue).cuda().bfloat16()
    x = torch.randn(*lead, k, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(*lead, n, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        (sg,) = [s for s in collect(model, (x, r), train=False) if s.kind == "gemm"]
    return sg, cutlass_specs(lower(sg))[0]


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):  # type: ignore[no-untyped-def]
    """One library folder for the module, every epilogue's library built in it at once (one
    nvcc each, 1-2 minutes): a configuration built once serves both shapes."""
    folder = tmp_path_factory.mktemp("cutlass-libraries")
    specs = [_spec(epilogue, (1000,))[1] for epilogue in sorted(EPILOGUES)]
    builds = CutlassBuilds(folder, len(specs))
    assert builds.build(specs, timeout_s=900), builds.failed
    return folder


@pytest.mark.parametrize("lead", [(1000,), (4, 250)], ids=["2d", "batch-seq"])
@pytest.mark.parametrize("epilogue", sorted(EPILOGUES))
def test_a_real_graphs_gemm_runs_as_cutlass(epilogue: str, lead, libraries, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """M = 1000 rows, not a multiple of the tile; as [1000, K] or a transformer's [4, 250, K]
    activations (the output the kernel's [M, N] viewed as [4, 250, N])."""
    tmp_path = libraries
    monkeypatch.setattr(cuda_host, "_LIBRARY_DIR", [tmp_path])
    sg, spec = _spec(epilogue, lead)
    with torch.no_grad():
        builds = CutlassBuilds(tmp_path, 1)
        assert builds.build([spec], timeout_s=600), builds.failed
        inputs = sg.make_inputs(0, "cuda")
        (got,) = SpecKernel(spec)(*inputs)
        ref = compute_reference(sg.module(), inputs)
        rejection, _ = compare(0, got, ref.exact[0], ref.eager[0] if ref.eager else None)
        assert rejection is None, rejection
