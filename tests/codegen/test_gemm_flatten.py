"""The persistent GEMM's variants: its tile loop flattened into one software pipeline
(FLATTEN) and two programs per SM (SM_PROGRAMS). Under Triton's interpreter they compute the
reference's result (odd shapes that leave some programs one tile fewer, an epilogue on slices,
TMA loads, batched, bf16 and fp32); both knobs need PERSISTENT; cached specs without them load
as before (unflattened, one program per SM)."""

from __future__ import annotations

import json

import pytest
import torch
from harness import bias_gelu_subgraph, check, traced_subgraph

from kernelpro_backend.codegen import IllegalSpec, KernelSpec, knob_space, render
from kernelpro_backend.lowering import lower

SMALL = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_warps=2, num_stages=2)


_bias_gelu = bias_gelu_subgraph


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("m", "k", "n"), [(64, 32, 64), (53, 40, 77)], ids=["even", "odd"])
@pytest.mark.parametrize("parts", [1, 2])
def test_flattened_persistent_loop_matches(
    dtype: torch.dtype, m: int, k: int, n: int, parts: int
) -> None:
    sg = _bias_gelu(m, k, n, dtype)
    spec = lower(sg).with_knobs(**SMALL, PERSISTENT=True, FLATTEN=True, EPILOGUE_SUBTILE=parts)
    source = render(spec).source
    assert "flatten=True" in source and "tile_c += tl.num_programs(0)" in source
    # fewer programs than tiles (the interpreter runs the grid the launcher gives): each
    # program walks several tiles, the last ones one fewer where the count does not divide
    check(sg, spec, seed=m + parts)


def test_flattened_with_tma_loads_and_batched() -> None:
    sg = _bias_gelu(64, 64, 64, torch.bfloat16)
    check(sg, lower(sg).with_knobs(**SMALL, PERSISTENT=True, FLATTEN=True, LOADS="tma"), seed=5)
    a, b = torch.randn(3, 40, 48), torch.randn(3, 48, 64)
    sg = traced_subgraph(lambda p, q: (torch.bmm(p, q).relu(),), (a, b), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, PERSISTENT=True, FLATTEN=True), seed=6)
    sg = traced_subgraph(
        lambda p, q: (torch.bmm(p, q).relu(),), (a.bfloat16(), b.bfloat16()), "gemm"
    )
    pipelined = dict(PERSISTENT=True, FLATTEN=True, LOADS="tma", EPILOGUE_SUBTILE=2)
    check(sg, lower(sg).with_knobs(**SMALL, **pipelined), seed=11)  # the default's form


def test_flatten_needs_a_persistent_program() -> None:
    spec = lower(_bias_gelu(32, 16, 64, torch.float32)).with_knobs(**SMALL)
    # a one-knob move reaches it from a persistent candidate (the search's neighbour step)
    assert knob_space(spec)["FLATTEN"] == (False,)
    assert knob_space(spec.with_knobs(PERSISTENT=True))["FLATTEN"] == (False, True)
    with pytest.raises(IllegalSpec, match="PERSISTENT=True"):
        spec.with_knobs(FLATTEN=True)
    assert "flatten" not in render(spec.with_knobs(PERSISTENT=True)).source


def test_two_programs_per_sm() -> None:
    sg = _bias_gelu(53, 40, 77, torch.float32)
    spec = lower(sg).with_knobs(**SMALL, PERSISTENT=True, FLATTEN=True, SM_PROGRAMS=2)
    assert "2 * num_sms" in render(spec).source
    check(sg, spec, seed=7)
    plain = lower(sg).with_knobs(**SMALL)
    with pytest.raises(IllegalSpec, match="PERSISTENT=True"):
        plain.with_knobs(SM_PROGRAMS=2)
    big = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4, num_warps=4)
    bf16 = lower(_bias_gelu(512, 512, 512, torch.bfloat16))
    with pytest.raises(IllegalSpec, match="shared memory"):  # 2 x 128 KiB
        bf16.with_knobs(**big, PERSISTENT=True, SM_PROGRAMS=2)
    bf16.with_knobs(**dict(big, num_stages=3), PERSISTENT=True, SM_PROGRAMS=2)  # 2 x 96 KiB


def test_a_cached_spec_without_the_knobs_loads_as_before() -> None:
    spec = lower(_bias_gelu(32, 16, 64, torch.float32)).with_knobs(**SMALL, PERSISTENT=True)
    raw = json.loads(spec.to_json())
    raw["knobs"] = [kv for kv in raw["knobs"] if kv[0] not in ("FLATTEN", "SM_PROGRAMS")]
    assert KernelSpec.from_json(json.dumps(raw)) == spec


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("loads", ["pointer", "tma"])
@pytest.mark.parametrize("parts", [1, 2])
def test_flattened_compiles_and_matches_on_gpu(loads: str, parts: int) -> None:
    """The bf16 seed's 128x256 tile in a flattened persistent loop (Triton's pipeliner, not the
    interpreter, decides what overlaps there), N odd for the tile."""
    sg = _bias_gelu(2048, 512, 1000, torch.bfloat16)
    knobs = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
    spec = lower(sg).with_knobs(
        **knobs, PERSISTENT=True, FLATTEN=True, EPILOGUE_SUBTILE=parts, LOADS=loads
    )
    check(sg, spec, seed=parts, inputs=sg.make_inputs(parts, "cuda"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_two_programs_per_sm_compile_and_match_on_gpu() -> None:
    sg = _bias_gelu(2048, 512, 1000, torch.bfloat16)
    knobs = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3)
    spec = lower(sg).with_knobs(**knobs, PERSISTENT=True, FLATTEN=True, SM_PROGRAMS=2, LOADS="tma")
    check(sg, spec, seed=9, inputs=sg.make_inputs(9, "cuda"))


def test_tensor_core_gemms_that_fill_the_gpu_start_pipelined() -> None:
    """The default: a flattened persistent program with TMA loads and a sliced epilogue where
    the operands allow TMA and the tiles fill the GPU (the H100 sweep: 98-100% of cuBLAS on
    bf16 GEMMs of 2048^3 and up); pointer loads, one tile per program, elsewhere."""
    big = lower(_bias_gelu(8192, 1024, 4096, torch.bfloat16))
    assert {k: big.knob(k) for k in ("LOADS", "PERSISTENT", "FLATTEN", "EPILOGUE_SUBTILE")} == {
        "LOADS": "tma", "PERSISTENT": True, "FLATTEN": True, "EPILOGUE_SUBTILE": 2,
    }  # fmt: skip
    small = lower(_bias_gelu(256, 256, 256, torch.bfloat16))  # 16 tiles for 132 SMs
    assert (small.knob("PERSISTENT"), small.knob("LOADS")) == (False, "pointer")
    ieee = lower(_bias_gelu(4096, 256, 4096, torch.float32))  # FMA units: no change measured
    assert (ieee.knob("PERSISTENT"), ieee.knob("LOADS")) == (False, "pointer")
    x = torch.randn(8192, 1004, dtype=torch.bfloat16)  # a row pitch of 2008 bytes: no TMA
    w = torch.randn(1004, 4096, dtype=torch.bfloat16)
    odd = lower(traced_subgraph(lambda a, c: (torch.mm(a, c),), (x, w), "gemm"))
    assert (odd.knob("PERSISTENT"), odd.knob("LOADS")) == (False, "pointer")


def test_row_reductions_in_the_epilogue_of_a_flattened_loop() -> None:
    """A GEMM whose epilogue reduces rows (BLOCK_N covers N) in the flattened persistent form,
    which the default takes for such GEMMs when they fill the GPU (without slices)."""
    x, w = torch.randn(96, 32).bfloat16(), torch.randn(32, 64).bfloat16()

    def reduced(a: torch.Tensor, c: torch.Tensor):
        y = torch.mm(a, c).float()
        lse = (y - y.amax(-1, keepdim=True)).exp().sum(-1)
        return y / y.abs().sum(-1, keepdim=True), y.amax(-1), lse

    sg = traced_subgraph(reduced, (x, w), "gemm")
    base = lower(sg).with_knobs(BLOCK_M=16, BLOCK_K=16, num_warps=2, num_stages=2)
    for extra in (dict(LOADS="tma"), dict(LOADS="tma", SM_PROGRAMS=2)):
        check(sg, base.with_knobs(PERSISTENT=True, FLATTEN=True, **extra), seed=3)
