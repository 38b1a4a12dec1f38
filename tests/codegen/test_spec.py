"""KernelSpec as data: JSON round trips, hashing, knob changes and their errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from harness import check, collect

from kernelpro_backend.codegen import IllegalSpec, KernelSpec, knob_space, render
from kernelpro_backend.lowering import lower


@pytest.fixture(scope="module")
def specs() -> dict[str, KernelSpec]:
    model = nn.Sequential(nn.Linear(33, 45), nn.GELU(), nn.LayerNorm(45))
    subgraphs = collect(model, (torch.randn(19, 33),), train=False)
    return {sg.kind: lower(sg) for sg in subgraphs}


def test_json_round_trip_rebuilds_the_same_kernel(specs: dict[str, KernelSpec]) -> None:
    for spec in specs.values():
        again = KernelSpec.from_json(spec.to_json())
        assert again == spec and hash(again) == hash(spec)
        assert again.digest == spec.digest
        assert render(again).source == render(spec).source


def test_digest_changes_with_knobs_and_precision(specs: dict[str, KernelSpec]) -> None:
    gemm = specs["gemm"]
    assert gemm.knob("BLOCK_K") != 16 and gemm.with_knobs(BLOCK_K=16).digest != gemm.digest
    assert gemm.with_precision("tf32").digest != gemm.digest
    assert 'input_precision="ieee"' in render(gemm).source
    assert 'input_precision="tf32"' in render(gemm.with_precision("tf32")).source


def test_knobs_are_sorted_and_readable(specs: dict[str, KernelSpec]) -> None:
    for spec in specs.values():
        names = [k for k, _ in spec.knobs]
        assert names == sorted(names)
        assert spec.knob("num_warps") in (1, 2, 4, 8, 16, 32)
        header = render(spec).source.splitlines()[:4]
        assert any(f"template={spec.template}" in line for line in header)


def test_illegal_knobs_raise_one_error_type_with_the_limit(specs: dict[str, KernelSpec]) -> None:
    gemm = specs["gemm"]
    with pytest.raises(IllegalSpec, match="shared memory.*Reducing block sizes or num_stages"):
        gemm.with_knobs(BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, num_stages=5)
    with pytest.raises(IllegalSpec, match="not one of"):
        gemm.with_knobs(BLOCK_M=48)
    with pytest.raises(IllegalSpec, match="do not exist"):
        gemm.with_knobs(ROWS=2)
    with pytest.raises(IllegalSpec, match="SPLIT_K=2 x BLOCK_K=32 exceeds K=33"):
        gemm.with_knobs(SPLIT_K=2, BLOCK_K=32)
    norm = specs["reduction"]
    with pytest.raises(IllegalSpec, match="BLOCK_C=128 is wider than the 45 columns"):
        norm.with_knobs(BLOCK_C=128)


def test_knob_space_lists_only_legal_values(specs: dict[str, KernelSpec]) -> None:
    for spec in specs.values():
        space = knob_space(spec)
        assert set(space) == {k for k, _ in spec.knobs}
        for name, values in space.items():
            assert spec.knob(name) in values
            for v in values:
                spec.with_knobs(**{name: v})  # must not raise


def test_every_legal_row_block_computes_the_same(specs: dict[str, KernelSpec]) -> None:
    model = nn.LayerNorm(45)
    (sg,) = collect(model, (torch.randn(19, 45),), train=False)
    spec = lower(sg)
    for block in knob_space(spec)["BLOCK_C"]:
        check(sg, spec.with_knobs(BLOCK_C=block, num_warps=1), seed=int(block))


def test_every_knob_declares_the_role_the_search_moves_it_by(specs: dict[str, KernelSpec]) -> None:
    from kernelpro_backend.codegen.knobs import _SPACE, ROLES
    from kernelpro_backend.search import codegen_space

    assert sorted({k for space in _SPACE.values() for k in space} - set(ROLES)) == []
    roles = codegen_space().knob_roles(specs["gemm"])
    assert set(roles) == set(dict(specs["gemm"].knobs))
    assert roles["BLOCK_M"] == roles["BLOCK_K"] == "tile" and roles["SPLIT_K"] == "split"
    assert roles["num_warps"] == "warps" and roles["GROUP_M"] == "other"
