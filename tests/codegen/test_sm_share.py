"""SM_SHARE: a row kernel's grid capped at a share of the SMs, each program looping over row
blocks (the energy objective's move: the same bytes from fewer SMs). Under the interpreter
(4 "SMs": one program at 25%) it computes what PyTorch does, row loops and pointwise kernels
alike; it is legal only where the cap is below the row blocks; older specs load without it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen import IllegalSpec, KernelSpec, knob_space, render
from kernelpro_backend.codegen.knobs import knob_roles
from kernelpro_backend.lowering import lower
from kernelpro_backend.search.rules import ENERGY_RULES, _apply_rule

ROWS, COLS = 160, 96  # 40 blocks of 4 rows: above 25% of 132 SMs


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize(
    ("name", "fn", "block_c"),
    [
        ("softmax", lambda x: (torch.softmax(x, -1),), 128),
        ("looped log_softmax", lambda x: (torch.log_softmax(x, -1),), 32),
        ("layer_norm", lambda x: (F.layer_norm(x, (COLS,)),), 128),
        ("pointwise", lambda x: (F.gelu(x) * 2 + 1,), 128),
    ],
)
def test_a_capped_grid_computes_what_pytorch_does(name, fn, block_c) -> None:
    x = _x(ROWS, COLS)
    sg = decomposed_subgraph(fn, x)
    spec = lower(sg).with_knobs(ROWS=4, BLOCK_C=block_c, num_warps=1, SM_SHARE=25)
    source = render(spec).source
    assert f"for block in range(tl.program_id(0), {ROWS // 4}, tl.num_programs(0)):" in source
    assert "num_sms * 25 // 100" in source
    check(sg, spec, inputs=[x])


def test_the_cap_is_legal_only_below_the_row_blocks() -> None:
    small = lower(decomposed_subgraph(lambda x: (torch.softmax(x, -1),), _x(64, COLS)))
    with pytest.raises(IllegalSpec, match="SM_SHARE=25"):
        small.with_knobs(ROWS=4, SM_SHARE=25)  # 16 blocks: the cap (33) changes nothing
    big = lower(decomposed_subgraph(lambda x: (torch.softmax(x, -1),), _x(4096, COLS)))
    assert knob_space(big.with_knobs(ROWS=4))["SM_SHARE"] == (0, 25, 50, 75, 100, 200)
    # a mean over a middle dim: its rows have a grid axis of their own, never capped
    middle = lower(decomposed_subgraph(lambda x: (x.mean(1),), _x(8, 64, 512)))
    assert knob_space(middle)["SM_SHARE"] == (0,)


def test_a_cached_row_spec_without_the_knob_loads_uncapped() -> None:
    spec = lower(decomposed_subgraph(lambda x: (torch.softmax(x, -1),), _x(ROWS, COLS)))
    old = spec.to_json().replace(',["SM_SHARE",0]', "").replace('["SM_SHARE",0],', "")
    assert "SM_SHARE" not in old
    assert KernelSpec.from_json(old) == spec
    assert "for block in range(" not in render(spec).source


def test_the_energy_objective_proposes_fewer_programs() -> None:
    assert ("programs", 100) in ENERGY_RULES
    spec = lower(decomposed_subgraph(lambda x: (torch.softmax(x, -1),), _x(8192, COLS)))
    spec = spec.with_knobs(ROWS=4)
    moves = _energy_moves(spec)
    assert {"SM_SHARE": 100} in moves
    assert {"SM_SHARE": 75} in _energy_moves(spec.with_knobs(SM_SHARE=100))


@pytest.mark.parametrize("objective", ["time", "energy"])
def test_only_an_energy_search_moves_the_grid_cap(objective: str) -> None:
    # a capped grid moves the same bytes in no less time: a time search never steps it
    from kernelpro_backend.runtime.result import EvalResult, EvalStatus
    from kernelpro_backend.search import ProposalRequest, RuleProposer
    from kernelpro_backend.search.space import codegen_space

    sg = decomposed_subgraph(lambda x: (torch.softmax(x, -1),), _x(8192, COLS))
    request = ProposalRequest(
        subgraph=sg,
        candidate=lower(sg).with_knobs(ROWS=4),
        result=EvalResult(EvalStatus.OK, median_ms=1.0),
        space=codegen_space(),
        history=(),
        move_prior=lambda move: 0.0,
        is_known=lambda c: False,
    )
    proposals = RuleProposer(objective=objective).propose(request)
    capped = [p for p in proposals if p.move.startswith("SM_SHARE")]
    assert bool(capped) == (objective == "energy")


def _energy_moves(spec: KernelSpec) -> list[dict]:
    """The knob changes the energy rules make of `spec` (search/rules.py)."""
    values, current = knob_space(spec), dict(spec.knobs)
    roles = {k: r.value for k, r in knob_roles(spec).items()}
    return [
        {knob: value}
        for role, target in ENERGY_RULES
        for knob, value in _apply_rule(role, target, values, current, roles, ("ieee",))
    ]
