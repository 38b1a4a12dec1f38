"""The GEMM template's shape specialisation under Triton's interpreter: axes the tile divides
load without masks, the others keep them, and both compute the reference's result (fp32 and
bf16, plain, epilogue, split-K, persistent, batched and transposed operands)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import check, traced_subgraph

from kernelpro_backend.codegen import lower, render
from kernelpro_backend.codegen.template_gemm import EvenAxes, even_axes

SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=2, num_stages=2)


def main_loop_loads(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if "_ptrs)" in line or "_ptrs, " in line]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("m", "n", "k"),
    [(64, 48, 32), (63, 48, 32), (64, 47, 32), (64, 48, 33), (37, 29, 45)],
    ids=["even", "odd-m", "odd-n", "odd-k", "odd-all"],
)
def test_masks_only_on_axes_the_tile_does_not_divide(
    m: int, n: int, k: int, dtype: torch.dtype
) -> None:
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    sg = traced_subgraph(torch.mm, (a, b), "gemm")
    spec = lower(sg).with_knobs(**SMALL)
    even = even_axes(spec)
    assert even == EvenAxes(m % 16 == 0, n % 16 == 0, k % 16 == 0)
    load_a, load_b = main_loop_loads(render(spec).source)
    assert ("mask=" in load_a) == (not (even.m and even.k)), load_a
    assert ("mask=" in load_b) == (not (even.n and even.k)), load_b
    check(sg, spec, seed=m + n + k)


def test_even_addmm_epilogue_matches() -> None:
    x, w, bias = torch.randn(32, 48), torch.randn(48, 64), torch.randn(64)
    sg = traced_subgraph(lambda b, a, c: (F.gelu(torch.addmm(b, a, c)),), (bias, x, w), "gemm")
    spec = lower(sg).with_knobs(**SMALL)
    assert even_axes(spec) == EvenAxes(True, True, True)
    check(sg, spec)


@pytest.mark.parametrize("k", [64, 72], ids=["even-k", "odd-k"])
def test_split_k_with_and_without_even_k(k: int) -> None:
    a, b = torch.randn(32, k), torch.randn(k, 16)
    sg = traced_subgraph(torch.mm, (a, b), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, SPLIT_K=2), seed=k)


def test_even_persistent_batched_and_transposed() -> None:
    a, b = torch.randn(3, 32, 48), torch.randn(3, 48, 32)
    sg = traced_subgraph(torch.bmm, (a, b), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, PERSISTENT=True), seed=1)
    at, bt = torch.randn(48, 32).t(), torch.randn(16, 48).t()  # both column-major
    sg = traced_subgraph(lambda x, y: (torch.mm(x, y).tanh(),), (at, bt), "gemm")
    spec = lower(sg).with_knobs(**SMALL)
    assert even_axes(spec) == EvenAxes(True, True, True)
    check(sg, spec, seed=2)
