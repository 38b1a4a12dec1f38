"""The attention backward template under Triton's interpreter.

CPU subgraphs captured from a model calling F.scaled_dot_product_attention (the CPU backward op)
are checked against that op on random inputs. The CUDA ops cannot run here, so their subgraphs
are traced on meta tensors (their meta functions give the real layouts: padded logsumexp of the
efficient kernel, [B,S,H,D] gradients, ...), lowered, and the kernel is run on CPU tensors of
those layouts with a consistent forward (out, logsumexp from float64 math) and compared with
float64 autograd. The logsumexp padding is NaN: reading it would show.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from harness import ATOL, RTOL, check, collect, traced_subgraph

from kernelpro_backend.codegen import IllegalSpec, Unsupported, build, knob_space
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.lowering import lower

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16]


class Attention(torch.nn.Module):
    def __init__(self, causal: bool, scale: float | None = None) -> None:
        super().__init__()
        self.causal, self.scale = causal, scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale)


def captured_backward(
    dtype: torch.dtype, causal: bool, d: int, scale: float | None = None
) -> Subgraph:
    q, k, v = (torch.randn(1, 2, 37, d, dtype=dtype, requires_grad=True) for _ in range(3))
    found = [
        s for s in collect(Attention(causal, scale), (q, k, v)) if s.pattern == "sdpa_backward"
    ]
    assert len(found) == 1, [s.pattern for s in found]
    return found[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [16, 64])
def test_captured_cpu_backward_matches_the_op(dtype: torch.dtype, causal: bool, d: int) -> None:
    sg = captured_backward(dtype, causal, d)
    spec = lower(sg)
    assert spec.template == "attention_backward" and spec.param("causal") is causal
    check(sg, spec)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_atomic_dq_and_small_blocks_compute_the_same(dtype: torch.dtype) -> None:
    sg = captured_backward(dtype, True, 16, scale=0.3)
    spec = lower(sg)
    small = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_M_DQ=16, BLOCK_N_DQ=16, num_warps=2)
    check(sg, spec.with_knobs(DQ="atomic", **small), seed=1)
    check(sg, spec.with_knobs(BLOCK_M=64, BLOCK_N=32, BLOCK_M_DQ=32, BLOCK_N_DQ=64), seed=2)


def test_head_dim_128_default_knobs_are_legal() -> None:
    sg = captured_backward(torch.bfloat16, False, 128)
    spec = lower(sg)
    assert spec.knob("BLOCK_N") == 64 and spec.knob("num_warps") == 4
    for name, values in knob_space(spec).items():
        assert spec.knob(name) in values, name
    with pytest.raises(IllegalSpec, match="registers per thread"):
        spec.with_knobs(BLOCK_N=128, num_warps=2)
    check(sg, spec)


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_op_with_different_query_and_key_lengths(causal: bool) -> None:
    q, out, dout = (torch.randn(1, 2, 21, 16) for _ in range(3))
    k, v = torch.randn(1, 2, 37, 16), torch.randn(1, 2, 37, 16)
    lse = torch.randn(1, 21, 2).transpose(1, 2)

    def bwd(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        gq, gk, gv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            t[0], t[1], t[2], t[3], t[4], t[5], 0.0, causal, scale=0.2
        )
        return gq, gk, gv

    check(traced_subgraph(bwd, (dout, q, k, v, out, lse), "attention"))


def test_only_grad_k_and_v_skip_the_dq_kernel_and_atomic_dq_is_illegal() -> None:
    q, k, v, out, dout = (torch.randn(1, 2, 19, 16) for _ in range(5))
    lse = torch.randn(1, 19, 2).transpose(1, 2)

    def bwd(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._scaled_dot_product_flash_attention_for_cpu_backward(*t, 0.0, False)
        return res[1], res[2]

    sg = traced_subgraph(bwd, (dout, q, k, v, out, lse), "attention")
    spec = check(sg)
    assert knob_space(spec)["DQ"] == ("kernel",)
    assert "attn_bwd_dq(" not in build(spec).rendered.source


# ---- CUDA variants, traced on meta tensors ----------------------------------------------------


def reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, offset: int | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:  # fmt: skip
    """float64 math attention on [B,H,S,D]: (out, natural-log lse, [dq, dk, dv])."""
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    s = q64 @ k64.transpose(-1, -2) * scale
    if offset is not None:
        m, n = torch.arange(s.shape[-2])[:, None], torch.arange(s.shape[-1])[None, :]
        s = s.masked_fill(n > m + offset, float("-inf"))
    out = s.softmax(-1) @ v64
    out.backward(dout.double())
    grads = [x.grad for x in (q64, k64, v64)]
    return out.detach(), torch.logsumexp(s.detach(), -1).float(), grads  # type: ignore[return-value]


def meta_subgraph(
    fn: Callable[..., tuple], tensors: Sequence[torch.Tensor]
) -> tuple[Subgraph, list[int]]:
    """The attention subgraph of `fn` traced on meta copies of `tensors` (layouts kept), and
    for each canonical input the index of the tensor it is."""
    metas = [
        torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in tensors
    ]
    sg = traced_subgraph(fn, metas, "attention")
    placeholders = [n for n in sg.nodes[0].graph.nodes if n.op == "placeholder"]
    return sg, [placeholders.index(p) for p in sg.inputs]


def check_against_math(
    sg: Subgraph, order: list[int], tensors: list[torch.Tensor], expected: list[torch.Tensor],
    dtype: torch.dtype, **knobs: object,
) -> None:  # fmt: skip
    spec = lower(sg).with_knobs(**knobs)  # type: ignore[arg-type]
    assert spec.template == "attention_backward"
    got = build(spec)(*[tensors[i] for i in order])
    which = [w for w, _ in spec.param("grads")]  # canonical outputs are in graph order
    assert sorted(which) == [0, 1, 2]
    for i, (g, w, (shape, stride, dt)) in enumerate(zip(got, which, spec.outputs, strict=True)):
        e = expected[w]
        assert (
            tuple(g.shape) == shape
            and tuple(g.stride()) == stride
            and str(g.dtype) == f"torch.{dt}"
        )
        scale = max(1.0, e.abs().max().item())
        torch.testing.assert_close(
            g.double(),
            e,
            rtol=RTOL[dtype],
            atol=ATOL[dtype] * scale,
            msg=lambda m, i=i: f"output {i}: {m}",
        )


def bhsd_case(dtype: torch.dtype, causal: bool, sq: int, sk: int, d: int, scale: float):
    gen = torch.Generator().manual_seed(sq * 7 + d)
    q = torch.randn(2, 3, sq, d, generator=gen).to(dtype)
    k, v = (torch.randn(2, 3, sk, d, generator=gen).to(dtype) for _ in range(2))
    dout = torch.randn(2, 3, sq, d, generator=gen).to(dtype)
    out, lse, grads = reference(q, k, v, dout, 0 if causal else None, scale)
    return q, k, v, out.to(dtype), dout, lse, grads


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_flash_backward_lowering(dtype: torch.dtype, causal: bool) -> None:
    scale = 0.17
    q, k, v, out, dout, lse, grads = bhsd_case(dtype, causal, 37, 37, 64, scale)
    seed, offset = torch.zeros(2, dtype=torch.uint64), torch.zeros((), dtype=torch.uint64)

    def bwd(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        gq, gk, gv = aten._scaled_dot_product_flash_attention_backward(
            t[0], t[1], t[2], t[3], t[4], t[5], None, None, 37, 37, 0.0, causal, t[6], t[7],
            scale=scale,
        )  # fmt: skip
        return gq, gk, gv

    tensors = [dout, q, k, v, out, lse, seed, offset]
    sg, order = meta_subgraph(bwd, tensors)
    check_against_math(sg, order, tensors, grads, dtype)
    check_against_math(sg, order, tensors, grads, dtype, DQ="atomic", BLOCK_N=32)


def test_cuda_flash_causal_with_unequal_lengths_is_unsupported() -> None:
    q, k = torch.randn(1, 2, 5, 16, device="meta"), torch.randn(1, 2, 9, 16, device="meta")
    lse = torch.empty(1, 2, 5, device="meta")
    seed = torch.empty(2, dtype=torch.uint64, device="meta")

    def bwd(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        gq, gk, gv = aten._scaled_dot_product_flash_attention_backward(
            t[0], t[0], t[1], t[1], t[0], t[2], None, None, 5, 9, 0.0, True, t[3], t[3]
        )
        return gq, gk, gv

    with pytest.raises(Unsupported, match="mask alignment"):
        lower(traced_subgraph(bwd, (q, k, lse, seed), "attention"))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_efficient_backward_reads_the_padded_logsumexp(
    dtype: torch.dtype, causal: bool
) -> None:
    sq, d = 37, 16
    q, k, v, out, dout, lse, grads = bhsd_case(dtype, causal, sq, sq, d, 1 / math.sqrt(d))
    padded = torch.full((2, 3, 64), float("nan"))  # ceil(37 / 32) * 32 per row
    padded[..., :sq] = lse
    out = out.transpose(1, 2).contiguous().transpose(1, 2)  # the efficient forward's layout
    seed, offset = torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64)

    def bwd(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._scaled_dot_product_efficient_attention_backward(
            t[0], t[1], t[2], t[3], None, t[4], t[5], t[6], t[7], 0.0, [True, True, True, False],
            causal,
        )  # fmt: skip
        return res[0], res[1], res[2]

    tensors = [dout, q, k, v, out, padded, seed, offset]
    sg, order = meta_subgraph(bwd, tensors)
    assert lower(sg).outputs[0][1] == (sq * 3 * d, d, 3 * d, 1)  # [B,S,H,D] gradients
    check_against_math(sg, order, tensors, grads, dtype)


@pytest.mark.parametrize("mask_type", [0, 1, 2])
def test_raw_efficient_backward_bshd_layout_and_bottom_right_mask(mask_type: int) -> None:
    sq, sk, d = 21, 37, 16
    scale = 1 / math.sqrt(d)  # this torch's meta function rejects an explicit scale here
    offset = {0: None, 1: 0, 2: sk - sq}[mask_type]
    gen = torch.Generator().manual_seed(mask_type)
    q, dout = (torch.randn(1, sq, 2, d, generator=gen) for _ in range(2))  # [B, S, H, D]
    k, v = (torch.randn(1, sk, 2, d, generator=gen) for _ in range(2))
    t = [x.transpose(1, 2) for x in (q, k, v, dout)]
    out, lse, grads = reference(*t, offset, scale)
    padded = torch.full((1, 2, 32), float("nan"))
    padded[..., :sq] = lse
    seed = torch.zeros((), dtype=torch.int64)

    def bwd(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._efficient_attention_backward(
            a[0], a[1], a[2], a[3], None, a[4], None, None, sq, sk, a[5], 0.0, a[6], a[6],
            mask_type, False,
        )  # fmt: skip
        return res[0], res[1], res[2]

    tensors = [dout, q, k, v, out.float().transpose(1, 2).contiguous(), padded, seed]
    sg, order = meta_subgraph(bwd, tensors)
    expected = [g.transpose(1, 2) for g in grads]  # back to [B, S, H, D]
    check_against_math(sg, order, tensors, expected, torch.float32, BLOCK_M=16, BLOCK_N=16)


def test_spec_round_trips_through_json() -> None:
    from kernelpro_backend.codegen import KernelSpec, render

    spec = lower(captured_backward(torch.float32, True, 16)).with_knobs(DQ="atomic")
    again = KernelSpec.from_json(spec.to_json())
    assert again == spec and again.digest == spec.digest
    source = render(again).source
    assert "def entry(" in source and "_launch=_direct" in source
    assert source.count("_launch(attn_bwd_") == 3  # preprocess, dK/dV with atomic dQ, convert


def test_masks_dropout_and_cudnn_are_unsupported_not_mislowered() -> None:
    q, lse = torch.randn(1, 2, 9, 16, device="meta"), torch.empty(1, 2, 9, device="meta")
    mask = torch.empty(9, 9, dtype=torch.bool, device="meta")  # float ones: test_attention_bias
    seed = torch.empty((), dtype=torch.int64, device="meta")

    def masked(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            t[0], t[0], t[0], t[0], t[0], t[1], 0.0, False, attn_mask=t[2]
        )
        return res[0], res[1], res[2]

    def dropout(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            t[0], t[0], t[0], t[0], t[0], t[1], 0.1, False
        )
        return res[0], res[1], res[2]

    def cudnn(*t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        res = aten._scaled_dot_product_cudnn_attention_backward(
            t[0], t[0], t[0], t[0], t[0], t[1], t[3], t[3], None, None, None, 9, 9, 0.0, False
        )  # fmt: skip
        return res[0], res[1], res[2]

    for fn, reason in ((masked, "additive float"), (dropout, "dropout"), (cudnn, "cuDNN")):
        sg = traced_subgraph(fn, (q, lse, mask, seed), "attention")
        with pytest.raises(Unsupported, match=reason):
            lower(sg)
