"""GPU: attention with a learned additive bias (T5's position bias, Swin's relative bias plus its
window mask) through the real CUDA subgraphs of a compiled module: the forward and backward
templates, default knobs and variants, match the aten ops the subgraphs call (the efficient
kernels, which return the bias's gradient), on consistent inputs (the backward's out and
logsumexp from the matching forward op)."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.bench.models import BiasedAttention, window_mask
from kernelpro_backend.codegen import IllegalSpec, KernelSpec, build
from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.fx_passes.ops import op_name
from kernelpro_backend.lowering import lower
from kernelpro_backend.lowering.operands import bound_args

pytestmark = pytest.mark.gpu
aten = torch.ops.aten
TOL = 1.6e-2  # bf16: rtol, and atol relative to max|eager|


def capture(b: int, h: int, s: int, d: int, windows: int) -> list[Subgraph]:
    """The efficient attention's forward and backward subgraphs (a mask of `windows` windows
    when > 0, -inf where a window's halves do not see each other, as Swin's shifted windows)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mask = window_mask(b, windows, s, "cuda") if windows else None
    q, k, v = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        found = find_subgraphs(BiasedAttention(h, s, mask).cuda(), q, k, v, train=True)
    got = [x for x in found if x.pattern in ("sdpa", "sdpa_backward")]
    assert sorted(x.pattern for x in got) == ["sdpa", "sdpa_backward"], [x.pattern for x in found]
    return got


def consistent(sg: Subgraph, spec: KernelSpec) -> list[torch.Tensor]:
    inputs = sg.make_inputs(seed=1, device="cuda")
    if spec.template == "attention":
        return inputs
    p = dict(spec.anchor)
    att = next(n for n in sg.nodes if "backward" in op_name(n))
    bias_node = bound_args(att)["attn_bias"]
    q, k, v = (inputs[p[r][0]] for r in ("q", "k", "v"))
    bias = bias_node.meta["val"]  # the view the op reads: rebuild it over the input
    base = inputs[p["bias"][0]]
    bias = torch.as_strided(base, bias.shape, bias.stride(), p["bias"][1])
    out, lse = aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, 0.0, False)[:2]
    inputs[p["out"][0]].copy_(out)
    inputs[p["lse"][0]].copy_(lse)
    return inputs


VARIANTS = {
    "default": {},
    "m64n32": dict(BLOCK_M=64, BLOCK_N=32),
    "atomic": dict(DQ="atomic"),
    "w8s3": dict(num_warps=8, num_stages=3),
}


@pytest.mark.parametrize(
    "shape",
    [(2, 4, 509, 64, 0), (64, 3, 49, 32, 4)],
    ids=["t5-like", "swin-like-shifted"],
)
def test_biased_attention_matches_the_efficient_ops(shape: tuple[int, ...]) -> None:
    for sg in capture(*shape):
        spec = lower(sg)
        assert spec.param("bias") is not None
        inputs = consistent(sg, spec)
        eager = sg.module()(*inputs)
        for label, knobs in VARIANTS.items():
            try:
                variant = spec.with_knobs(**knobs)  # type: ignore[arg-type]
            except IllegalSpec:
                continue  # not every knob is the forward's, nor fits every size
            got = build(variant)(*inputs)
            for i, (g, e) in enumerate(zip(got, eager, strict=True)):
                finite = e.float()[e.float().isfinite()]
                scale = float(finite.abs().max().clamp_min(1.0))
                torch.testing.assert_close(
                    g.float(), e.float(), rtol=TOL, atol=TOL * scale, equal_nan=True,
                    msg=lambda m, k=label, i=i, p=sg.pattern: f"{p} {k} output {i}: {m}",
                )  # fmt: skip
