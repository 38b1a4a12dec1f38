"""Default GEMM tiles (codegen/gemm_configs.py): the largest tile that fills the GPU, the
largest one already from 95% of its SMs (measured faster at 2048^3 on the H100), a narrow M
tile for skinny GEMMs, the pipelined form with the largest tile only, and Inductor's configurations fitted to a problem."""

from __future__ import annotations

import pytest
import torch
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.codegen.gemm_configs import NUM_SMS, inductor_candidates
from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.lowering import lower


def _spec(m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16):
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    gm = make_fx(lambda x, y: (torch.mm(x, y),), tracing_mode="fake",
                 decomposition_table=select_decomp_table())(a, b)  # fmt: skip
    (sg,) = [s for s in find_subgraphs(gm, "inference") if s.kind == "gemm"]
    return lower(sg)


def _tile(spec) -> tuple[int, int]:
    return spec.knob("BLOCK_M"), spec.knob("BLOCK_N")


@pytest.mark.parametrize(
    ("size", "tile"),
    [
        (4096, (128, 256)),  # 512 tiles
        (2048, (128, 256)),  # 128 tiles: 97% of the SMs, taken
        (1024, (64, 64)),  # 128x256 gives 32 tiles, 128x128 64, 64x128 128 (< 132): 64x64
    ],
)
def test_the_default_tile_is_the_largest_that_fills_the_gpu(size: int, tile: tuple[int, int]):
    spec = _spec(size, size, size)
    assert _tile(spec) == tile
    bm, bn = tile
    assert -(-size // bm) * -(-size // bn) >= 0.95 * NUM_SMS


@pytest.mark.parametrize(("size", "pipelined"), [(4096, True), (1024, False)])
def test_only_the_largest_tile_starts_pipelined(size: int, pipelined: bool):
    """TMA + persistent + flattened loops was measured faster with the 128x256 tile only; with
    1024^3's 64x64 tiles it ran 0.0117 ms against the pointer seed's 0.0074 (H100)."""
    spec = _spec(size, size, size)
    assert (spec.knob("LOADS"), spec.knob("FLATTEN")) == (
        ("tma", True) if pipelined else ("pointer", False)
    )


def test_a_skinny_gemm_gets_a_narrow_m_tile():
    spec = _spec(16, 4096, 4096)
    assert spec.knob("BLOCK_M") == 16 and spec.knob("BLOCK_K") == 128


def test_inductor_candidates_start_with_the_default_and_are_legal():
    spec = _spec(2048, 2048, 2048)
    found = inductor_candidates(spec)
    assert found[0] == dict(spec.knobs)
    for knobs in found:
        spec.with_knobs(**knobs)  # raises if illegal
    assert len({tuple(sorted(k.items())) for k in found}) == len(found)


@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "wanted"),
    [
        # KernelBench L1_9's shape: max-autotune's pick on the H100 (64x64x32, 2 stages, 4 warps)
        (32768, 32768, 32, torch.float32, (64, 64, 32, 2, 4)),
        (1024, 1024, 1024, torch.bfloat16, (64, 128, 64, 3, 4)),  # 128 programs: 97% of SMs
    ],
)
def test_a_search_starts_from_a_few_of_inductors_tiles(m, n, k, dtype, wanted):
    from kernelpro_backend.codegen import seed_configs
    from kernelpro_backend.codegen.gemm_configs import SEED_CONFIGS, SMALL_TILE

    spec = _spec(m, n, k, dtype)
    configs = seed_configs(spec)
    tiles = [tuple(c.knob(x) for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) for c in configs]
    assert 0 < len(configs) <= SEED_CONFIGS and len(set(tiles)) == len(tiles)  # a tile each
    assert wanted in [
        (*t, c.knob("num_stages"), c.knob("num_warps")) for t, c in zip(tiles, configs, strict=True)
    ]
    assert (spec.knob("BLOCK_M"), spec.knob("BLOCK_N"), spec.knob("BLOCK_K")) not in tiles
    areas = [bm * bn for bm, bn, _ in tiles]
    assert areas == sorted(areas, reverse=True)  # largest tiles first
    for bm, bn, _ in tiles:
        assert -(-m // bm) * -(-n // bn) >= 0.95 * NUM_SMS  # no SMs left idle
        assert bm * bn >= SMALL_TILE or m * n < 4 * NUM_SMS * SMALL_TILE


def test_only_gemms_get_seed_configurations():
    from kernelpro_backend.codegen import seed_configs

    a = torch.randn(64, 128)
    gm = make_fx(
        lambda x: (torch.softmax(x, -1),),
        tracing_mode="fake",
        decomposition_table=select_decomp_table(),
    )(a)
    (sg,) = find_subgraphs(gm, "inference")
    assert seed_configs(lower(sg)) == []


@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "split"),
    [
        (16, 4096, 16384, torch.bfloat16, 8),  # a LoRA update: 32 programs of 16x128
        (512, 512, 8192, torch.bfloat16, 4),  # a small layer's weight gradient: 64 programs
        (256, 256, 131072, torch.float32, 16),  # 16 programs, K long enough for 16 splits
        (256, 256, 256, torch.float32, 2),  # 8 K steps of 32: two splits of 4
        (256, 256, 128, torch.float32, None),  # K too short: 4 steps
        (1024, 1024, 1024, torch.bfloat16, None),  # 256 programs fill the GPU
        (4096, 4096, 4096, torch.bfloat16, None),  # persistent default
    ],
)
def test_a_gemm_that_leaves_most_sms_idle_starts_with_k_split(m, n, k, dtype, split):
    from kernelpro_backend.codegen import seed_configs
    from kernelpro_backend.codegen.gemm_configs import SPLIT_K_MIN_STEPS

    spec = _spec(m, n, k, dtype)
    configs = seed_configs(spec)
    splits = [c for c in configs if c.knob("SPLIT_K") > 1]
    if split is None:
        assert splits == []
        return
    assert splits == configs[:1]  # measured first, the default's tile with K split
    first = configs[0]
    assert dict(first.knobs) == dict(spec.knobs, SPLIT_K=split)
    programs = -(-m // spec.knob("BLOCK_M")) * -(-n // spec.knob("BLOCK_N"))
    assert 2 * programs <= NUM_SMS
    assert k // (spec.knob("BLOCK_K") * split) >= SPLIT_K_MIN_STEPS
    steps = k // spec.knob("BLOCK_K")
    fewer = split // 2  # fewer splits would leave SMs idle, unless K could not be split more
    assert programs * fewer < NUM_SMS or steps < 2 * split * SPLIT_K_MIN_STEPS
