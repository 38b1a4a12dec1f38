"""What the LLM is told: the subgraph, the candidate (spec JSON and rendered source, or
free-form source), the measurement, the findings in plain language, the history and the legal
knob space; the source contracts in the system message."""

from __future__ import annotations

import json

import pytest
from synthetic import FakeSubgraph, SyntheticSpace

from kernelpro_backend.profilers.findings import Finding, Severity
from kernelpro_backend.runtime.candidate import SourceCandidate
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import ProposalRequest, codegen_space
from kernelpro_backend.search.llm import finding_line, system_message, user_message

SPILL = Finding(
    "ptxas",
    "spill_bytes",
    128.0,
    0.0,
    Severity.HIGH,
    "Registers spill to local memory; use fewer warps or smaller tiles.",
    (("num_warps", 2),),
)
HISTORY = (
    {"id": 1, "parent": None, "move": "initial", "candidate": {"knobs": {"num_warps": 4}},
     "status": "ok", "median_ms": 0.5, "reward": 0.0},
    {"id": 2, "parent": 1, "move": "num_warps:up", "candidate": {"knobs": {"num_warps": 8}},
     "status": "compile_error", "median_ms": None, "reward": -1.0,
     "message": "ptxas: too many resources requested"},
)  # fmt: skip


def request(subgraph, space, candidate, result, history=HISTORY):
    return ProposalRequest(
        subgraph=subgraph,
        candidate=candidate,
        result=result,
        space=space,
        history=history,
        move_prior=lambda move: 0.0,
        is_known=lambda c: False,
    )


def test_finding_line_reads_as_plain_language():
    line = finding_line(SPILL)
    assert line == (
        "[high] ptxas spill_bytes = 128 (threshold 0): Registers spill to local memory; use "
        'fewer warps or smaller tiles. Suggested knob change: {"num_warps": 2}.'
    )


def test_a_real_spec_is_shown_with_its_rendered_source_and_knob_space(softmax_subgraph):
    space = codegen_space()
    spec = space.initial(softmax_subgraph)[0]  # the lowered seed; its variants follow
    result = EvalResult(
        EvalStatus.OK, median_ms=0.05, spread_ms=0.001, sol_ms=0.01, sol_fraction=0.2,
        findings=(SPILL,),
    )  # fmt: skip
    text = user_message(request(softmax_subgraph, space, spec, result))
    # the subgraph
    assert "pattern: softmax (kind reduction" in text and "precision policy: ieee" in text
    assert "ops: amax, sub, exp, sum, div" in text
    assert "in0: shape [8, 40], stride [40, 1], float32" in text
    assert "out0: shape [8, 40]" in text and "aten::amax" in text
    # the candidate, as data and as source
    assert spec.to_json() in text and "@triton.jit" in text and "def entry(" in text
    # measurement, findings, history, knob space
    assert "median 0.05 ms" in text and "20% of speed of light (0.01 ms)" in text
    assert finding_line(SPILL) in text
    assert "#2 (from #1, move num_warps:up): compile_error (ptxas: too many resources" in text
    for name, legal in space.knob_space(spec).items():
        assert f"- {name}: {json.dumps(list(legal))}" in text


def test_free_form_source_is_shown_and_knobs_are_said_not_to_apply():
    space = SyntheticSpace({"num_warps": (1, 2)}, [{"num_warps": 1}])
    source = SourceCandidate("triton", "def entry(x):\n    return [x * 2]\n", "entry")
    failed = EvalResult(EvalStatus.WRONG, message="output 0 differs", details={"max_abs": 3.5})
    # the synthetic space lists knobs for anything; a codegen space lists none for source
    space.knob_space = lambda c: {} if isinstance(c, SourceCandidate) else dict(space.values)
    text = user_message(request(FakeSubgraph(), space, source, failed, history=()))
    assert "free-form triton source, entry 'entry'" in text and "return [x * 2]" in text
    assert "status wrong: output 0 differs" in text and '"max_abs": 3.5' in text
    assert "propose rewrites only" in text and "Tried so far\nnothing yet" in text
    assert "Findings\nnone" in text


def test_long_histories_show_the_most_recent_trials():
    space = SyntheticSpace({"num_warps": (1, 2)}, [{"num_warps": 1}])
    history = tuple(
        {"id": i, "parent": 1, "move": f"m{i}", "candidate": {}, "status": "ok", "median_ms": 1.0}
        for i in range(1, 101)
    )
    result = EvalResult(EvalStatus.OK, median_ms=1.0)
    text = user_message(request(FakeSubgraph(), space, space.spec(num_warps=1), result, history))
    assert "(60 earlier trials not shown)" in text
    assert "move m100)" in text and "move m60)" not in text and "move m61)" in text


@pytest.mark.parametrize(
    ("languages", "has_triton", "has_cuda"),
    [(("triton", "cuda"), True, True), (("triton",), True, False), ((), False, False)],
)
def test_system_message_has_the_format_and_the_contracts_of_allowed_languages(
    languages, has_triton, has_cuda
):
    text = system_message(3, languages)
    assert '{"proposals": [PROPOSAL, ...]}' in text and "at most 3 proposals" in text
    assert ("host function named `entry`" in text) == has_triton
    assert ("kernelpro-launch" in text) == has_cuda
    assert "Owns:" not in text  # the CUDA contract without cuda_source's module docstring
    if not languages:
        assert "Only knob changes are accepted" in text
