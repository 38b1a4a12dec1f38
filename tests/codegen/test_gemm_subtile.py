"""The GEMM epilogue on column slices of the tile (EPILOGUE_SUBTILE): under Triton's
interpreter every slicing computes the reference's result (activations, bias, several
outputs, odd N, persistent and batched programs, bf16 and fp32); the knob is refused where
the whole row or an atomic accumulation is needed; cached specs without it load as unsliced
(the rule proposer's use of it: tests/search/test_rules.py)."""

from __future__ import annotations

import pytest
import torch
from harness import bias_gelu_subgraph, check, traced_subgraph

from kernelpro_backend.codegen import IllegalSpec, knob_space, render
from kernelpro_backend.lowering import lower

SMALL = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=16, num_warps=2, num_stages=2)


_bias_gelu = bias_gelu_subgraph


@pytest.mark.parametrize("parts", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("m", "n"), [(32, 128), (37, 100)], ids=["even", "odd"])
def test_sliced_epilogue_matches(parts: int, dtype: torch.dtype, m: int, n: int) -> None:
    sg = _bias_gelu(m, 24, n, dtype)
    spec = lower(sg).with_knobs(**SMALL, EPILOGUE_SUBTILE=parts)
    source = render(spec).source
    assert source.count("tl.split(") == parts - 1 and source.count("tl.store(") == parts
    check(sg, spec, seed=parts + m)


def test_two_outputs_persistent_and_batched() -> None:
    def two(a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.mm(a, c)
        return y.relu(), y.sigmoid() * 2

    sg = traced_subgraph(two, (torch.randn(40, 32), torch.randn(32, 96)), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, EPILOGUE_SUBTILE=2, PERSISTENT=True), seed=3)
    a, b = torch.randn(3, 32, 48), torch.randn(3, 48, 64)
    sg = traced_subgraph(lambda p, q: (torch.bmm(p, q).tanh(),), (a, b), "gemm")
    check(sg, lower(sg).with_knobs(**SMALL, EPILOGUE_SUBTILE=4), seed=4)


def test_illegal_where_the_whole_row_is_needed_or_slices_are_too_narrow() -> None:
    x, w = torch.randn(32, 16), torch.randn(16, 64)

    def normalised(a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor]:
        y = torch.mm(a, c)
        return (y / y.sum(-1, keepdim=True),)

    reduced = traced_subgraph(normalised, (x, w), "gemm")
    spec = lower(reduced).with_knobs(**SMALL)
    assert knob_space(spec)["EPILOGUE_SUBTILE"] == (1,)
    with pytest.raises(IllegalSpec, match="whole row"):
        spec.with_knobs(EPILOGUE_SUBTILE=2)
    plain = lower(traced_subgraph(torch.mm, (x, w), "gemm")).with_knobs(**SMALL)
    with pytest.raises(IllegalSpec, match="under 16 columns"):
        plain.with_knobs(BLOCK_N=32, EPILOGUE_SUBTILE=4)
    assert knob_space(plain)["EPILOGUE_SUBTILE"] == (1, 2, 4)


def test_a_cached_spec_without_the_knob_loads_unsliced() -> None:
    import json

    from kernelpro_backend.codegen import KernelSpec

    spec = lower(_bias_gelu(32, 16, 64, torch.float32)).with_knobs(**SMALL)
    raw = json.loads(spec.to_json())
    raw["knobs"] = [kv for kv in raw["knobs"] if kv[0] not in ("EPILOGUE_SUBTILE", "LOADS")]
    assert KernelSpec.from_json(json.dumps(raw)) == spec  # the kernels cached before the knobs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("parts", [1, 2, 4])
@pytest.mark.parametrize("persistent", [False, True])
def test_sliced_epilogue_compiles_and_matches_on_gpu(parts: int, persistent: bool) -> None:
    """The 128x256 tile the bf16 seed picks, its accumulator in the tensor cores' layout, sliced
    for the epilogue (reshape/permute/split are register moves on the GPU, not under the
    interpreter)."""
    sg = _bias_gelu(1024, 512, 1000, torch.bfloat16)  # N odd for the tile: masked last slices
    knobs = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
    spec = lower(sg).with_knobs(**knobs, EPILOGUE_SUBTILE=parts, PERSISTENT=persistent)
    check(sg, spec, seed=parts, inputs=sg.make_inputs(parts, "cuda"))
