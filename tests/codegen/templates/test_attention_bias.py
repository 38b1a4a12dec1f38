"""Attention with an additive bias (T5's learned position bias, Swin's relative bias and window
mask, Hugging Face's additive masks) under Triton's interpreter.

CPU subgraphs captured from a model passing SDPA a float `attn_mask` (the CPU flash ops read it
forward and backward) are checked against those ops. The CUDA efficient ops, which also return
the bias's gradient, are traced on meta tensors (their meta functions give the real layouts:
the bias broadcast over the batch by a zero stride, its gradient's last dimension padded to 16)
and checked against float64 math autograd, the bias gradient included.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from harness import check, collect
from test_attention_backward import meta_subgraph

from kernelpro_backend.codegen import Unsupported, build
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.lowering import lower

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: 2e-4, torch.bfloat16: 2e-2}  # rtol, and atol relative to max|expected|


class Masked(torch.nn.Module):
    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, mask) -> torch.Tensor:  # type: ignore[no-untyped-def]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


def captured(dtype: torch.dtype, mask_shape: tuple[int, ...]) -> list[Subgraph]:
    q, k, v = (torch.randn(2, 3, 37, 16, dtype=dtype, requires_grad=True) for _ in range(3))
    found = collect(Masked(), (q, k, v, torch.randn(mask_shape, dtype=dtype)))
    assert sorted(s.pattern for s in found) == ["sdpa", "sdpa_backward"], found
    return found


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_shape", [(1, 3, 37, 37), (37, 37), (2, 1, 1, 37)], ids=str)
def test_cpu_ops_with_a_float_mask_match_forward_and_backward(
    dtype: torch.dtype, mask_shape: tuple[int, ...]
) -> None:
    for sg in captured(dtype, mask_shape):
        spec = lower(sg)
        _, _, strides = spec.param("bias")
        # broadcast dimensions are read with stride 0
        padded = (1,) * (4 - len(mask_shape)) + mask_shape
        assert all(s == 0 for s, n in zip(strides, padded, strict=True) if n == 1), strides
        check(sg, spec)
        if spec.template == "attention_backward":
            check(sg, spec.with_knobs(DQ="atomic", BLOCK_M=16, BLOCK_N=16), seed=1)


def test_a_mask_free_spec_has_no_bias_field() -> None:
    q, k, v = (torch.randn(1, 2, 9, 16, requires_grad=True) for _ in range(3))

    class Plain(torch.nn.Module):
        def forward(self, q, k, v):  # type: ignore[no-untyped-def]
            return F.scaled_dot_product_attention(q, k, v)

    for sg in collect(Plain(), (q, k, v)):
        assert "bias" not in dict(lower(sg).anchor)  # old cache entries keep their digests


def test_a_boolean_mask_is_refused() -> None:
    q = torch.randn(1, 2, 9, 16, device="meta")
    mask = torch.ones(9, 9, dtype=torch.bool, device="meta")

    def fwd(q: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, q, q, attn_mask=m)
        return out, lse

    from harness import traced_subgraph

    with pytest.raises(Unsupported, match="only additive float biases"):
        lower(traced_subgraph(fwd, (q, mask), "attention"))


# ---- the CUDA efficient ops (bias gradient), traced on meta tensors --------------------------


def math_reference(q, k, v, bias, dout, causal: bool, scale: float):  # type: ignore[no-untyped-def]
    """float64 (out, natural-log lse, [dq, dk, dv, d_bias as the op returns it: per batch])."""
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    b64 = bias.detach().double().expand(q.shape[0], -1, -1, -1).clone().requires_grad_()
    s = q64 @ k64.transpose(-1, -2) * scale + b64
    if causal:
        m, n = torch.arange(s.shape[-2])[:, None], torch.arange(s.shape[-1])[None, :]
        s = s.masked_fill(n > m, float("-inf"))
    out = s.softmax(-1) @ v64
    out.backward(dout.double())
    grads = [x.grad for x in (q64, k64, v64, b64)]
    return out.detach(), torch.logsumexp(s.detach(), -1).float(), grads


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_efficient_ops_with_a_broadcast_bias_and_its_gradient(
    dtype: torch.dtype, causal: bool
) -> None:
    b, h, sq, d = 2, 3, 37, 16
    scale = 1 / math.sqrt(d)
    gen = torch.Generator().manual_seed(7 + causal)
    q, k, v, dout = (torch.randn(b, h, sq, d, generator=gen).to(dtype) for _ in range(4))
    # [1, H, Sq, Sk] viewed from a buffer padded to 48 columns (SDPA's alignment), expanded over B
    store = torch.randn(1, h, sq, 48, generator=gen).to(dtype)
    bias = store[..., :sq].expand(b, h, sq, sq)
    out, lse, grads = math_reference(q, k, v, bias, dout, causal, scale)

    def fwd(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._scaled_dot_product_efficient_attention(
            t[0], t[1], t[2], t[3][..., :sq].expand(b, h, sq, sq), True, 0.0, causal
        )
        return res[0], res[1]

    sg, order = meta_subgraph(fwd, [q, k, v, store])
    spec = lower(sg)
    assert spec.template == "attention" and spec.param("bias")[2][0] == 0
    got = build(spec)(*[[q, k, v, store][i] for i in order])
    by_which = {ref[1]: g for (ref, *_), g in zip(spec.stores, got, strict=True)}
    got_out, got_lse = by_which[0], by_which[1]
    assert torch.all(got_lse[..., sq:] == float("inf"))  # the padding, as the efficient op pads
    close(got_out, out, dtype, "out")
    close(got_lse[..., :sq], lse, torch.float32, "lse")

    padded = torch.full((b, h, 64), float("nan"))  # the efficient forward's padded logsumexp
    padded[..., :sq] = lse
    out_c = out.to(dtype).transpose(1, 2).contiguous().transpose(1, 2)
    seed, offset = torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64)

    def bwd(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._scaled_dot_product_efficient_attention_backward(
            t[0], t[1], t[2], t[3], t[4][..., :sq].expand(b, h, sq, sq), t[5], t[6], t[7], t[8],
            0.0, [True, True, True, True], causal,
        )  # fmt: skip
        return res[0], res[1], res[2], res[3]

    tensors = [dout, q, k, v, store, out_c, padded, seed, offset]
    sg, order = meta_subgraph(bwd, tensors)
    spec = lower(sg)
    which = [w for w, _ in spec.param("grads")]  # canonical outputs are in graph order
    assert sorted(which) == [0, 1, 2, 3]
    assert spec.outputs[which.index(3)][1] == (h * sq * 48, sq * 48, 48, 1)  # padded, as the op's
    for knobs in ({}, dict(DQ="atomic", BLOCK_M=16, BLOCK_N=16, BLOCK_M_DQ=16, BLOCK_N_DQ=16)):
        got = build(spec.with_knobs(**knobs))(*[tensors[i] for i in order])  # type: ignore[arg-type]
        by_which = dict(zip(which, got, strict=True))
        for w, e in enumerate(grads):
            close(by_which[w], e, dtype, f"grad {w} with {knobs}")
        if causal:  # the masked scores' gradient is written as zeros, not left unwritten
            m, n = torch.arange(sq)[:, None], torch.arange(sq)[None, :]
            assert torch.all(by_which[3].float()[..., n > m] == 0)


def close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(
        got.double(), expected.double(), rtol=TOL[dtype], atol=TOL[dtype] * scale,
        msg=lambda m: f"{what}: {m}",
    )  # fmt: skip


def test_default_blocks_fit_a_short_window() -> None:
    """Swin's 49-token windows: no default block longer than 64 (the sequence's power of two)."""
    q, k, v = (torch.randn(4, 3, 49, 32, requires_grad=True) for _ in range(3))
    found = collect(Masked(), (q, k, v, torch.randn(1, 3, 49, 49)))
    blocks = ("BLOCK_M", "BLOCK_N", "BLOCK_M_DQ", "BLOCK_N_DQ")
    for sg in found:
        spec = lower(sg)
        knobs = dict(spec.knobs)
        assert all(knobs[b] <= 64 for b in blocks if b in knobs), knobs
        assert knobs["BLOCK_N"] == 64 and knobs.get("BLOCK_M_DQ", 64) == 64, knobs
        check(sg, spec)
