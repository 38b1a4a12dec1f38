"""A GEMM whose output leaves the subgraph through views that permute it - attention's heads
put back side by side, y = (p @ v).transpose(1, 2).contiguous().view(B, T, C), as minGPT-style
code writes it - lowers to one GEMM kernel that stores the permuted layout directly, instead
of the GEMM plus a copy. So does the head split when matmul's decomposition puts a same-shape
expand before each head's copy (q @ k.transpose(-2, -1) on split heads). Checked against the
reference under the Triton interpreter, forward and training, with every GEMM on its kernel."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from gemm_training import GemmKernels, train_like_eager
from harness import check

from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.lowering import lower


class HandAttention(nn.Module):
    """minGPT-style attention with ReLU scores (KernelBench L3_50's shape of code)."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.qkv, self.proj, self.heads, self.d = nn.Linear(d, 3 * d), nn.Linear(d, d), heads, d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(self.d, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.relu((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1))))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


def test_the_heads_put_back_side_by_side_are_stored_by_the_gemm():
    x = torch.randn(2, 16, 32)
    gemms = [s for s in find_subgraphs(HandAttention(), x, train=False) if s.kind == "gemm"]
    assert len(gemms) == 4  # the QKV projection, the two attention bmms, the output projection
    for sg in gemms:
        spec = lower(sg)
        assert spec.template == "gemm", sg.pattern
        check(sg, spec, seed=3)
    # att @ v: a [B*H, T, D] tile stored as [B, T, H, D], one kernel with one output
    (av,) = [sg for sg in gemms if lower(sg).domain == (8, 16, 8)]
    assert [tuple(o.meta["val"].shape) for o in av.outputs] == [(2, 16, 4, 8)]


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_hand_written_attention_trains_through_the_gemm_kernels(fallback):
    provider = GemmKernels()
    train_like_eager(HandAttention, torch.randn(2, 16, 32), provider, fallback)
    assert provider.refused == [] and provider.kernels >= 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_permuted_store_gemms_compile_and_match_on_gpu():
    """bf16 at a GPT-2 block's attention size: every GEMM of the block, the permuted stores
    included, compiled for the GPU and equal to the reference."""
    model = HandAttention(d=768, heads=12).to("cuda", torch.bfloat16)
    x = torch.randn(4, 512, 768, device="cuda", dtype=torch.bfloat16)
    gemms = [s for s in find_subgraphs(model, x, train=False) if s.kind == "gemm"]
    assert len(gemms) == 4
    for i, sg in enumerate(gemms):
        check(sg, lower(sg), seed=i, inputs=sg.make_inputs(i, "cuda"))
