"""A GEMM whose outputs are slices of it seen through views - the head split of an attention
QKV projection (split, view to heads, transpose, contiguous) - lowers to one GEMM kernel
storing each slice where its columns are, instead of the GEMM plus a copy per slice. Checked
against the reference under the Triton interpreter (forward and training)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from gemm_training import GemmKernels, train_like_eager
from harness import check

from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.lowering import lower


class SplitHeads(nn.Module):
    """q, k, v = qkv(x).split(D); each viewed as [B, H, S, D/H] and made contiguous."""

    def __init__(self, d: int = 64, heads: int = 4, chunks: int = 3, scale: float = 0.0) -> None:
        super().__init__()
        self.qkv, self.heads, self.chunks = nn.Linear(d, chunks * d), heads, chunks
        self.scale = scale  # 0: none; else each head tensor is scaled after the split

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, s, d = x.shape
        heads = [
            p.view(b, s, self.heads, d // self.heads).transpose(1, 2).contiguous()
            for p in self.qkv(x).split(d, dim=2)
        ]
        return tuple(h * self.scale for h in heads) if self.scale else tuple(heads)


class PermutedHeads(nn.Module):
    """timm's and Swin's attention: qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4), the
    heads picked from it, and k transposed for q @ k^T (matmul's expand and copy of each)."""

    def __init__(self, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.qkv, self.heads = nn.Linear(d, 3 * d), heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        return ((q * 0.5) @ k.transpose(-2, -1)).softmax(dim=-1) @ v


class ChunkOnly(nn.Module):
    """The chunks themselves, made contiguous (no head reshape)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 96)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(c.contiguous() for c in self.proj(x).chunk(3, dim=-1))


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        (SplitHeads(), (2, 16, 64)),
        (SplitHeads(d=32, heads=2, chunks=2, scale=0.5), (3, 8, 32)),
        (ChunkOnly(), (40, 32)),
    ],
)
def test_a_gemm_with_sliced_outputs_lowers_to_one_kernel(model, shape):
    x = torch.randn(*shape)
    (sg,) = [s for s in find_subgraphs(model, x, train=False) if s.kind == "gemm"]
    spec = lower(sg)
    assert spec.template == "gemm" and len(spec.stores) == len(sg.outputs) > 1
    assert all(predicate for _, _, _, predicate in spec.stores)  # each slice where it lies
    check(sg, spec)


def test_heads_picked_from_a_permuted_qkv_are_stored_by_the_gemm():
    """The picked heads' source is a permuted view of the GEMM's output: its map is the
    accumulator's pushed through the views, not the domain laid over it as a reshape (which
    read it at two maps and left the whole QKV GEMM to the fallback)."""
    x = torch.randn(4, 16, 32)
    found = find_subgraphs(PermutedHeads(), x, train=False)
    (sg,) = [s for s in found if s.kind == "gemm" and s.pattern.startswith("addmm")]
    spec = lower(sg)
    assert spec.template == "gemm" and len(spec.stores) == len(sg.outputs) > 1
    check(sg, spec)


def test_uneven_split_chunks_are_not_taken_as_slices():
    class Uneven(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(16, 48)

        def forward(self, x):
            a, b = self.proj(x).split([16, 32], dim=-1)
            return a.contiguous(), b.contiguous()

    x = torch.randn(8, 16)
    (sg,) = [s for s in find_subgraphs(Uneven(), x, train=False) if s.kind == "gemm"]
    with pytest.raises(Exception, match="does not map|Unsupported|larger"):
        lower(sg)


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_a_model_trains_through_the_sliced_gemm_kernel(fallback):
    provider = GemmKernels()
    train_like_eager(SplitHeads, torch.randn(2, 16, 64), provider, fallback)
    assert provider.multi_output == 1  # the forward QKV GEMM ran as one kernel, three outputs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_head_split_gemm_compiles_and_matches_on_gpu():
    """bf16 at a transformer's size: the GEMM storing q, k, v as [B, H, S, D/H] tensors."""
    model = SplitHeads(d=1024, heads=16).to("cuda", torch.bfloat16)
    x = torch.randn(4, 512, 1024, device="cuda", dtype=torch.bfloat16)
    (sg,) = [s for s in find_subgraphs(model, x, train=False) if s.kind == "gemm"]
    check(sg, lower(sg), seed=1)
