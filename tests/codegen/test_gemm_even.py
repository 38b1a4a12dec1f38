"""The GEMM template's shape specialisation under Triton's interpreter: axes the tile divides
load without masks, the others keep them, and both compute the reference's result (fp32 and
bf16, plain, epilogue, split-K, persistent, batched and transposed operands)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from harness import check, traced_subgraph

from kernelpro_backend.codegen import build, knob_space, render
from kernelpro_backend.codegen.templates.gemm import EvenAxes, even_axes
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.precision import precision_mode
from kernelpro_backend.runtime.validate import compute_reference, round_to_tf32

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["row-major", "column-major"])
def test_tma_descriptor_loads_match_at_odd_and_even_shapes(dtype: torch.dtype, layout: str) -> None:
    """Descriptors zero-fill out-of-bounds boxes: M=40, N=24, K=48 with 16x16x32 tiles have
    partial tiles on every axis and still need no masks."""
    for m, n, k in ((40, 24, 48), (32, 48, 64)):
        if layout == "row-major":
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        else:
            a, b = torch.randn(k, m, dtype=dtype).t(), torch.randn(n, k, dtype=dtype).t()
        sg = traced_subgraph(lambda x, y: (torch.mm(x, y).relu(),), (a, b), "gemm")
        spec = lower(sg).with_knobs(**{**SMALL, "BLOCK_K": 32}, LOADS="tma")
        source = render(spec).source
        assert "tl.make_tensor_descriptor" in source and not main_loop_loads(source)
        check(sg, spec, seed=m)


def test_tma_batched_and_persistent() -> None:
    a, b = torch.randn(2, 24, 32), torch.randn(2, 32, 40)
    sg = traced_subgraph(torch.bmm, (a, b), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, LOADS="tma", PERSISTENT=True))


def test_tma_is_illegal_for_unaligned_operand_pitch() -> None:
    from kernelpro_backend.codegen import IllegalSpec

    a, b = torch.randn(16, 33), torch.randn(33, 16)  # a fp32 row of 33 is 132 bytes
    spec = lower(traced_subgraph(torch.mm, (a, b), "gemm"))
    with pytest.raises(IllegalSpec, match="132 bytes, not a multiple of 16"):
        spec.with_knobs(LOADS="tma")
    assert "tma" not in knob_space(spec)["LOADS"]


def test_specs_cached_before_the_loads_knob_still_load() -> None:
    import json

    from kernelpro_backend.codegen import KernelSpec

    spec = lower(traced_subgraph(torch.mm, (torch.randn(8, 16), torch.randn(16, 8)), "gemm"))
    raw = json.loads(spec.to_json())
    raw["knobs"] = [kv for kv in raw["knobs"] if kv[0] != "LOADS"]
    assert KernelSpec.from_json(json.dumps(raw)) == spec  # LOADS="pointer" is the old kernel


def test_tf32_operands_are_rounded_to_nearest_not_truncated() -> None:
    """Triton's tf32 dot drops the low 13 mantissa bits (truncation); PyTorch's tf32 rounds.
    The interpreter's dot is exact float32, so the kernel's result must be the product of the
    *rounded* operands: far closer to it than to the exact or the truncated product."""
    m, n, k = 37, 29, 45
    a, b = torch.randn(m, k), torch.randn(k, n)
    sg = dataclasses.replace(traced_subgraph(torch.mm, (a, b), "gemm"), precision="tf32")
    spec = lower(sg).with_knobs(**SMALL)
    assert spec.precision == "tf32"
    source = render(spec).source
    assert "0xFFFFE000" in source and 'input_precision="tf32"' in source
    kernel = build(spec)

    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # the subgraph's input order
        by_shape = {(m, k): a, (k, n): b}
        (out,) = kernel(*(by_shape[tuple(shape)] for shape, _, _ in sg.input_meta))
        return out

    got = run(a, b)
    rounded = round_to_tf32(a).double() @ round_to_tf32(b).double()
    exact = a.double() @ b.double()
    truncated = (a.view(torch.int32) & -8192).view(torch.float32).double() @ (
        b.view(torch.int32) & -8192
    ).view(torch.float32).double()
    err_rounded = float((got.double() - rounded).abs().max())
    assert err_rounded < 1e-4, err_rounded  # float32 accumulation of tf32-exact products
    assert float((got.double() - exact).abs().max()) > 10 * err_rounded
    assert float((got.double() - truncated).abs().max()) > 10 * err_rounded
    # NaN and inf pass through the rounding unchanged
    a[0, 0], b[1, 2] = float("nan"), float("inf")
    got = run(a, b)
    assert torch.isnan(got[0]).all() and torch.isinf(got[1:, 2]).any()


def test_tf32_reference_on_the_cpu_rounds_operands_like_the_gpu() -> None:
    """CPU matmuls ignore the tf32 policy; the reference emulates it, so a tf32 kernel run in the
    interpreter is judged against PyTorch's tf32 (rounded operands), and an IEEE one is not."""
    a, b = torch.randn(33, 47), torch.randn(47, 21)
    x = torch.tensor([1.0 + 2**-12, 1.0 + 2**-11 + 2**-12, float("inf"), float("nan")])
    r = round_to_tf32(x)
    assert r[0] == 1.0 and r[1] == 1.0 + 2**-10 and torch.isinf(r[2]) and torch.isnan(r[3])
    with precision_mode("tf32"):
        ref = compute_reference(torch.mm, [a, b])
    assert ref.eager is not None
    assert torch.equal(ref.eager[0], round_to_tf32(a) @ round_to_tf32(b))
    with precision_mode("ieee"):
        ref = compute_reference(torch.mm, [a, b])
    assert ref.eager is not None and torch.equal(ref.eager[0], a @ b)
