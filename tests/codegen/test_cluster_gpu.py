"""GPU tier of the row-resident CUDA template ("row_cluster"): every row subgraph of softmax,
log-softmax, LayerNorm, RMSNorm and cross-entropy, forward and backward, float32 and bfloat16,
compiled by nvcc for the device and checked against the subgraph's reference on fresh inputs
at each legal cluster size, ONLINE form and HOLD place, and with inputs that are not aligned for vector loads."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernelpro_backend.codegen import IllegalSpec, knob_space
from kernelpro_backend.examples import RMSNorm
from kernelpro_backend.lowering import lower

pytestmark = pytest.mark.gpu


class _Rows(nn.Module):
    """The row family in one graph: each output feeds the loss, so the backward has them all."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.ln, self.rms = nn.LayerNorm(n), RMSNorm(n)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        y = x.softmax(-1) * 3 + x.log_softmax(-1).exp() + self.ln(x) + self.rms(x)
        return y.float().square().mean() + F.cross_entropy(x.float(), t)


def _cluster_cases(n: int, dtype: torch.dtype):
    from harness import cluster_alternatives, collect

    model = _Rows(n).cuda().to(dtype)
    x = torch.randn(5, n, device="cuda", dtype=dtype, requires_grad=True)
    t = torch.randint(0, n, (5,), device="cuda")
    for sg in collect(model, [x, t]):
        try:
            seed = lower(sg)
        except Exception:
            continue
        for alt in cluster_alternatives(seed):
            yield sg, alt


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("n", [4096, 65536])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cluster_kernels_match_reference(n: int, dtype: torch.dtype) -> None:
    from harness import check

    from kernelpro_backend.bench.row_sweep import precompile

    cases = []
    for sg, alt in _cluster_cases(n, dtype):
        space = knob_space(alt)
        variants = {alt}
        for cluster in space["CLUSTER"]:
            variants.add(alt.with_knobs(CLUSTER=cluster))
        variants.add(alt.with_knobs(VEC=1))
        # a softmax's statistics in two waves or one pair; the row's share in registers or
        # in shared memory, at the default and the widest cluster
        widest = alt.with_knobs(CLUSTER=max(space["CLUSTER"]))
        for base, online, hold in itertools.product((alt, widest), space["ONLINE"], space["HOLD"]):
            try:
                variants.add(base.with_knobs(ONLINE=online, HOLD=hold))
            except IllegalSpec:
                continue
        cases += [(sg, spec) for spec in sorted(variants, key=lambda s: s.knobs)]
    precompile([spec for _, spec in cases])  # nvcc on every core, then one check at a time
    for sg, spec in cases:
        check(sg, spec)
    assert len(cases) >= 6, f"only {len(cases)} row_cluster kernels were built"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_misaligned_inputs_take_the_scalar_path() -> None:
    """A contiguous input that starts 4 bytes past a 16-byte boundary: the vector body would
    fault, the kernel must notice and take its 1-element body."""
    from harness import check

    cases = list(_cluster_cases(8192, torch.float32))
    assert cases
    for sg, alt in cases:
        if alt.knob("VEC") == 1:
            continue
        inputs = []
        for x in sg.make_inputs(3):
            buf = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
            shifted = buf[1:].view(x.shape) if x.is_contiguous() and x.dim() else x
            if shifted is not x:
                shifted.copy_(x)
            inputs.append(shifted)
        check(sg, alt, inputs=inputs)
        if "shared" in knob_space(alt)["HOLD"]:  # the 1-element copy into shared memory
            check(sg, alt.with_knobs(HOLD="shared"), inputs=inputs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_and_instance_norms_match_reference(dtype: torch.dtype) -> None:
    """Rows over several dims: GroupNorm's per-channel weight read from the element's channel
    coordinate, InstanceNorm's batch-norm-over-a-unit-dim rows; forward and backward, at the
    default, the widest cluster and VEC=1."""
    from harness import check, cluster_alternatives, collect

    cases = []
    for module, shape in ((nn.GroupNorm(4, 32), (2, 32, 64, 64)), (nn.InstanceNorm2d(16, affine=True), (2, 16, 128, 128))):  # fmt: skip
        x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)
        for sg in collect(module.cuda().to(dtype), [x]):
            try:
                seed = lower(sg)
            except Exception:
                continue
            for alt in cluster_alternatives(seed):
                widest = alt.with_knobs(CLUSTER=max(knob_space(alt)["CLUSTER"]))
                cases += [(sg, s) for s in {alt, widest, alt.with_knobs(VEC=1)}]
    assert len(cases) >= 6
    for sg, spec in cases:
        check(sg, spec)
