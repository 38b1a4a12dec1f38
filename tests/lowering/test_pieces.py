"""cat and slice_scatter fused into pointwise and row kernels (lowering/pieces.py): each point reads
the piece its coordinate falls in, at the coordinate shifted into the piece. RoPE as Hugging Face
writes it (rotate_half: torch.cat((-x2, x1), -1)) was cut into a neg kernel and a mul-add kernel
per tensor with the cat left to the fallback, its backward into three. Kernels run under the
Triton interpreter against the reference subgraph; the RoPE model trains like eager."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from harness import check, collect, decomposed_subgraph

from kernelpro_backend import make_backend
from kernelpro_backend.codegen.errors import MapConflict
from kernelpro_backend.lowering import lower


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rope(nn.Module):
    """Linear -> heads split by view/permute/unbind -> RoPE on q and k -> SDPA."""

    def __init__(self, d: int = 64, heads: int = 2) -> None:
        super().__init__()
        self.qkv, self.heads = nn.Linear(d, 3 * d), heads

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _rope_inputs(s: int = 16, d: int = 64, heads: int = 2) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return torch.randn(2, s, d), torch.randn(s, d // heads), torch.randn(s, d // heads)


def _pieces(sg) -> list[str]:
    return [op for op in sg.ops if op in ("cat", "slice_scatter")]


def test_the_forward_rope_of_q_is_one_subgraph_holding_its_cat():
    x, cos, sin = _rope_inputs()
    found = collect(Rope(), (x.requires_grad_(), cos, sin), train=True)
    forward = [sg for sg in found if sg.graph == "forward" and sg.kind == "pointwise"]
    assert len(forward) == 2  # q's and k's
    for sg in forward:
        assert sorted(sg.ops) == ["add", "cat", "mul", "mul", "neg"]
        assert lower(sg).template == "pointwise"
        check(sg)


def test_the_backward_rope_lowers_whole():
    """The backward's slice_scatters of the gradient's halves (and the stack of the q, k and v
    gradients for the QKV projection) fuse with the gradient's products into one kernel."""
    x, cos, sin = _rope_inputs()
    found = collect(Rope(), (x.requires_grad_(), cos, sin), train=True)
    backward = [sg for sg in found if sg.graph == "backward" and _pieces(sg)]
    assert len(backward) == 1
    (sg,) = backward
    assert _pieces(sg).count("slice_scatter") == 4  # two halves of each of q and k
    assert not [s for s in found if s.graph == "backward" and s.ops in (["neg"], ["mul"])]
    check(sg)


class _PieceKernels:
    """Every pointwise/reduction subgraph with a cat or slice_scatter on its lowered kernel."""

    def __init__(self) -> None:
        self.kernels = 0

    def find(self, sg):
        from kernelpro_backend.runtime.spec_kernel import build_kernel

        if sg.kind not in ("pointwise", "reduction") or not _pieces(sg):
            return None
        self.kernels += 1
        return build_kernel(lower(sg))


def rope_trains_like_eager(model: Rope, ref: Rope, inputs: tuple, tol: dict) -> None:
    """`model` compiled on its cat-fused kernels (q's and k's forward, the backward) against
    `ref` (the same weights) in eager: outputs and every gradient within `tol`."""
    x, cos, sin = inputs
    provider = _PieceKernels()
    torch._dynamo.reset()
    compiled = torch.compile(
        model, backend=make_backend(provider=provider), options={"fallback": "eager"}
    )
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = compiled(xa, cos, sin), ref(xb, cos, sin)
    torch.testing.assert_close(got, want, **tol)
    got.float().square().sum().backward()
    want.float().square().sum().backward()
    assert provider.kernels == 3  # q's and k's forward, the backward
    torch.testing.assert_close(xa.grad, xb.grad, **tol)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad.float(), q.grad.float(), **tol)


def test_rope_trains_like_eager_on_its_kernels():
    inputs = _rope_inputs()
    torch.manual_seed(1)
    model, ref = Rope(), Rope()
    ref.load_state_dict(model.state_dict())
    rope_trains_like_eager(model, ref, inputs, {"rtol": 1e-4, "atol": 1e-4})


def _last_dim_halves(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return x * c + rotate_half(x) * c.flip(-1)


def _odd_pieces(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """2x3 + 5 along the last dim, the pieces computed (not views of an input alone)."""
    return torch.cat((a[..., :3] * 2.0, a[..., 3:].exp(), b + 1.0), dim=-1).sigmoid()


def _three_way(x: torch.Tensor) -> torch.Tensor:
    """x's last dim reordered: [6:11], [0:3] + 1, [3:6] - 1; x read at three shifts."""
    return torch.cat((x[..., 6:], x[..., :3] + 1.0, x[..., 3:6] - 1.0), dim=-1) * x


def _middle_dim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.cat((a.sin(), b * 2.0), dim=1) + 1.0


def _broadcast_piece(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A piece broadcast over the other dims ([5] expanded to x's rows), one computed from a
    broadcast operand."""
    rows = x.shape[0]
    return torch.cat((x * bias[:3], bias.expand(rows, 5).exp()), dim=1).relu()


CASES = {
    "rotate_half": (_last_dim_halves, [(3, 4, 8, 32), (8, 32)]),
    "odd_pieces": (_odd_pieces, [(4, 5, 6), (4, 5, 5)]),
    "three_way": (_three_way, [(6, 7, 11)]),
    "middle_dim": (_middle_dim, [(4, 3, 16), (4, 5, 16)]),
    "broadcast_piece": (_broadcast_piece, [(7, 3), (5,)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cat_lowers_into_one_kernel_as_pytorch_computes_it(case):
    fn, shapes = CASES[case]
    torch.manual_seed(0)
    sg = decomposed_subgraph(fn, *(torch.randn(s) for s in shapes))
    assert "cat" in sg.ops
    spec = check(sg)
    assert spec.template == "pointwise"


def test_pieces_are_picked_exactly_with_inf_and_nan_beside_them():
    """An inf or NaN in one piece stays out of the others (where, not a sum of zeroed loads)."""
    x = torch.randn(4, 16)
    sg = decomposed_subgraph(lambda x: torch.cat((x[:, 8:] * 2.0, x[:, :8].exp()), 1), x)
    x[0, 3], x[1, 12], x[2, 5] = math.inf, math.nan, 100.0  # exp(100) is inf in float32
    check(sg, inputs=[x])  # the reference's inf and NaN at the same places
    (got,) = _run(sg, x)
    assert got[0, 11].isinf() and got[1, 4].isnan() and got[2, 13].isinf()
    assert got.isfinite().sum() == x.numel() - 3


def _run(sg, *inputs):
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    return build_kernel(lower(sg))(*inputs)


def test_a_slice_scatter_lowers_into_one_kernel():
    def fn(g: torch.Tensor) -> torch.Tensor:
        zeros = torch.zeros_like(g)
        half = g.shape[-1] // 2
        a = torch.slice_scatter(zeros, -g[..., :half], dim=-1, start=half)
        return a + torch.slice_scatter(zeros, g[..., half:] * 3.0, dim=-1, start=0, end=half)

    sg = decomposed_subgraph(fn, torch.randn(2, 3, 10))
    assert "slice_scatter" in sg.ops
    check(sg)


def test_a_piece_computed_by_a_reduction_cuts_the_subgraph_there():
    """A reduction's result cannot be recomputed at a shifted index: MapConflict names it, so
    lowering/split.py cuts below it and loads its result."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        s = x.sum(-1, keepdim=True)
        y = x / s
        return torch.cat((y[:, 4:], y[:, :4]), dim=1)

    from harness import traced_subgraph

    sg = traced_subgraph(fn, [torch.rand(4, 8) + 1.0], "reduction")
    with pytest.raises(MapConflict, match="shifted index") as e:
        lower(sg)
    assert e.value.cut is not None and "sum" in str(e.value.cut.target)


def test_each_piece_reads_its_input_only_in_its_range():
    """A piece's loads are masked to its range (its address wraps into bounds everywhere, the
    mask spares the other pieces' points the read): rotate_half reads each half once."""
    from kernelpro_backend.codegen.render import render

    sg = decomposed_subgraph(lambda x: rotate_half(x) * 2.0, torch.randn(4, 64))
    spec = lower(sg)
    pieces = [args for op, args, _ in spec.ops if op == "piece_load"]
    assert [[(lo, hi) for _, lo, hi in ranges] for _, (_, ranges) in pieces] == [
        [(0, 32)],
        [(32, 64)],
    ]
    source = render(spec).source
    assert source.count(">= 32) & (") == 1 and source.count(">= 0) & (") == 1


def test_a_row_reduction_over_a_cat_lowers_with_its_alternatives():
    """softmax over the rows of a cat along the rows: the row template reads each piece in its
    rows; the CUDA row cluster (which reads whole rows in order) reads the pieces' loads as
    plain loads, in bounds everywhere. A cat along the row itself wraps the index, which the
    cluster refuses (it reads rows in order), so only the Triton row template is offered."""
    from kernelpro_backend.codegen import alternatives
    from kernelpro_backend.codegen.render import render

    a, b = torch.randn(2, 8192), torch.randn(3, 8192)
    sg = decomposed_subgraph(lambda a, b: torch.cat((a, b.exp()), 0).softmax(-1), a, b)
    spec = check(sg)
    assert spec.template == "row_reduction" and "cat" in sg.ops
    assert any(op == "piece_load" for op, _, _ in spec.ops)
    (alt,) = [a for a in alternatives(spec) if a.template == "row_cluster"]
    assert alt.ops == spec.ops and render(alt).source  # CUDA C++, its pieces as plain loads
    x = torch.randn(4, 8192)
    sg = decomposed_subgraph(lambda x: torch.cat((x[:, 4096:], -x[:, :4096]), 1).softmax(-1), x)
    assert check(sg).template == "row_reduction"
    assert not [a for a in alternatives(lower(sg)) if a.template == "row_cluster"]


class _Stacked(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.stack((a * b, a + b), dim=-1).flatten(-2).relu()


def test_a_stacks_backward_selecting_a_computed_gradient_lowers_in_parts():
    """The backward of torch.stack selects each half of a computed gradient (relu's where):
    the select maps its source at the selected index, so the two selects are a MapConflict the
    split cuts (each part lowers), where the group was refused whole (Unsupported)."""
    a, b = (torch.randn(4, 6, requires_grad=True) for _ in range(2))
    backward = [sg for sg in collect(_Stacked(), (a, b), train=True) if sg.graph == "backward"]
    assert len(backward) == 2  # the gradient's where, then the products reading its halves
    for sg in backward:
        check(sg)
