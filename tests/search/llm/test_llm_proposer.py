"""LLMProposer over a local OpenAI-compatible server and the real `openai` client: knob changes
become legal KernelSpec children of a real lowered subgraph, illegal ones are dropped with a
log line, free-form sources become SourceCandidates, malformed answers give no children (or
the fallback's, logged), the prompt carries findings and history, and a whole search with the
LLM proposer finds the optimum of a synthetic landscape."""

from __future__ import annotations

import json
import logging

import pytest
from chat_server import Reply
from synthetic import (
    BOWL_OPTIMUM,
    BOWL_SEED,
    FakeSubgraph,
    SyntheticSpace,
    bowl,
    bowl_search_parts,
)

from kernelpro_backend.codegen import KernelSpec
from kernelpro_backend.profilers.findings import Finding, Severity
from kernelpro_backend.runtime.candidate import SourceCandidate
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import Budget, ProposalRequest, RuleProposer, codegen_space, optimize

LOGGER = "kernelpro.llm"
LATENCY = Finding(
    "roofline",
    "bottleneck",
    "latency-bound",
    None,
    Severity.HIGH,
    "Only one program runs: split the rows over more programs.",
    (("ROWS", 1),),
)
TRITON_SOURCE = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax(x, y, C: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.arange(0, BLOCK)
    v = tl.load(x + row * C + col, mask=col < C, other=float("-inf"))
    e = tl.exp(v - tl.max(v, 0))
    tl.store(y + row * C + col, e / tl.sum(e, 0), mask=col < C)


def softmax_rows(x):
    y = torch.empty_like(x)
    _softmax[(x.shape[0],)](x, y, C=x.shape[1], BLOCK=64)
    return [y]
"""


def answer(*proposals) -> str:
    return json.dumps({"proposals": list(proposals)})


@pytest.fixture
def spec_request(softmax_subgraph):
    """A request for the lowered softmax spec, measured with a latency-bound finding."""
    space = codegen_space()
    spec = space.initial(softmax_subgraph)[0]  # the lowered seed; its variants follow
    history = (
        {"id": 1, "parent": None, "move": "initial", "candidate": space.describe(spec),
         "status": "ok", "median_ms": 0.05, "reward": 0.0},
        {"id": 2, "parent": 1, "move": "num_warps:up", "candidate": {"knobs": {"num_warps": 2}},
         "status": "wrong", "median_ms": None, "reward": -1.0},
    )  # fmt: skip
    return ProposalRequest(
        subgraph=softmax_subgraph,
        candidate=spec,
        result=EvalResult(EvalStatus.OK, median_ms=0.05, findings=(LATENCY,)),
        space=space,
        history=history,
        move_prior=lambda move: 0.0,
        is_known=lambda c: c == spec,
    )


def test_knob_changes_become_legal_kernel_spec_children(serve, llm_proposer, spec_request):
    serve([
        answer(
            {"knobs": {"ROWS": 1}, "reason": "one row per program fills the GPU"},
            {"knobs": {"ROWS": 2.0, "num_warps": 4}, "reason": "JSON numbers as floats"},
        )
    ])  # fmt: skip
    proposals = llm_proposer().propose(spec_request)
    spec = spec_request.candidate
    assert [p.move for p in proposals] == [
        "llm:knobs:ROWS:down",
        "llm:knobs:ROWS:down+num_warps:up",
    ]
    first, second = (p.candidate for p in proposals)
    assert isinstance(first, KernelSpec) and first == spec.with_knobs(ROWS=1)
    assert second == spec.with_knobs(ROWS=2, num_warps=4)
    assert proposals[0].reason == "llm: one row per program fills the GPU"
    assert proposals[0].score > proposals[1].score  # the model's order is kept


def test_illegal_knob_values_are_dropped_with_a_log_line(serve, llm_proposer, spec_request, caplog):
    serve([
        answer(
            {"knobs": {"BLOCK_C": 4096}},  # wider than the 40 columns
            {"knobs": {"num_warps": 3}},  # not a legal value
            {"knobs": {"TILE": 7}},  # no such knob
            {"knobs": {"num_warps": [4]}},  # not a scalar
            {"knobs": {"ROWS": 4}},
        )
    ])  # fmt: skip
    proposer = llm_proposer(max_proposals=5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        proposals = proposer.propose(spec_request)
    assert [p.candidate for p in proposals] == [spec_request.candidate.with_knobs(ROWS=4)]
    assert "BLOCK_C=4096 is wider than the 40 columns" in caplog.text
    assert "num_warps=3 is not one of" in caplog.text
    assert "do not exist" in caplog.text and "must be numbers, strings or booleans" in caplog.text
    assert proposer.stats()["illegal"] == 4 and proposer.stats()["accepted"] == 1


def test_a_triton_source_becomes_a_source_candidate(serve, llm_proposer, spec_request):
    serve([
        answer(
            {"language": "triton", "entry": "softmax_rows", "source": TRITON_SOURCE,
             "reason": "one program per row"},
        )
    ])  # fmt: skip
    [proposal] = llm_proposer().propose(spec_request)
    assert proposal.candidate == SourceCandidate("triton", TRITON_SOURCE, "softmax_rows")
    assert proposal.move == "llm:rewrite:triton"
    assert proposal.reason == "llm: one program per row"


def test_sources_outside_the_contract_are_dropped(serve, llm_proposer, spec_request, caplog):
    serve([
        answer(
            {"language": "cuda", "entry": "k", "source": "__global__ void k() {}"},
            {"language": "rust", "entry": "k", "source": "fn k() {}"},
            {"language": "triton", "entry": "not a name", "source": "def f(): pass"},
            {"language": "triton", "entry": "missing", "source": "def f(): pass"},
            {"language": "triton", "entry": "f", "source": "def f(): pass", "knobs": {"a": 1}},
        )
    ])  # fmt: skip
    proposer = llm_proposer(languages=("triton",), max_proposals=5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert proposer.propose(spec_request) == []
    assert "language 'cuda'; this search takes ['triton']" in caplog.text
    assert "must name a function" in caplog.text and "defines 'missing'" in caplog.text
    assert "exactly one of 'knobs' and 'source'" in caplog.text
    assert "this node gets no children" in caplog.text


def test_a_malformed_answer_gives_no_children_and_is_logged(
    serve, llm_proposer, spec_request, caplog
):
    serve(["I would increase the number of warps."])
    proposer = llm_proposer()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert proposer.propose(spec_request) == []
    assert "malformed answer" in caplog.text and "increase the number of warps" in caplog.text
    assert proposer.stats()["malformed"] == 1


def test_without_a_usable_answer_the_fallback_proposes_and_that_is_logged(
    serve, llm_proposer, spec_request, caplog
):
    serve(["not json", *[Reply(status=500)] * 4])  # then 1 + 3 retries that all fail
    proposer = llm_proposer(fallback=RuleProposer())
    rules = RuleProposer().propose(spec_request)
    assert rules
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert proposer.propose(spec_request) == rules
        assert "answer was malformed; this node gets" in caplog.text
        assert f"gets {len(rules)} children from the 'rules' proposer instead" in caplog.text
        caplog.clear()
        assert proposer.propose(spec_request) == rules
        assert "failed 4 times" in caplog.text and "the request failed; this node" in caplog.text
    assert proposer.stats()["fallbacks"] == 2


def test_duplicates_are_dropped(serve, llm_proposer, spec_request, caplog):
    spec = spec_request.candidate
    serve([
        answer(
            {"knobs": {"ROWS": 8}},  # the current value: the node itself
            {"knobs": {"ROWS": 4}},
            {"knobs": {"ROWS": 4.0}},  # the same child again
        )
    ])  # fmt: skip
    proposer = llm_proposer()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        proposals = proposer.propose(spec_request)
    assert spec.knob("ROWS") == 8
    assert [p.candidate for p in proposals] == [spec.with_knobs(ROWS=4)]
    assert proposer.stats()["duplicates"] == 2 and "already in the tree" in caplog.text


def test_precision_changes_follow_the_subgraphs_policy(serve, llm_proposer, caplog):
    space = SyntheticSpace({"precision": ("ieee", "tf32"), "num_warps": (1, 2)}, [])
    parent = space.spec(precision="ieee", num_warps=1)
    serve([answer({"knobs": {"precision": "tf32"}}, {"knobs": {"num_warps": 2}})])
    request = ProposalRequest(
        subgraph=FakeSubgraph(precision="ieee"),
        candidate=parent,
        result=EvalResult(EvalStatus.OK, median_ms=1.0),
        space=space,
        history=(),
        move_prior=lambda move: 0.0,
        is_known=lambda c: c == parent,
    )
    with caplog.at_level(logging.INFO, logger=LOGGER):
        proposals = llm_proposer().propose(request)
    assert [p.move for p in proposals] == ["llm:knobs:num_warps:up"]
    assert "outside the subgraph's precision policy" in caplog.text


def test_the_prompt_the_server_receives_has_findings_history_and_knobs(
    serve, llm_proposer, spec_request
):
    server = serve([answer()])
    llm_proposer().propose(spec_request)
    [request] = server.requests
    system, user = (m["content"] for m in request["messages"])
    assert "JSON" in system and "kernelpro-launch" in system  # the CUDA contract
    assert LATENCY.guidance in user and 'Suggested knob change: {"ROWS": 1}' in user
    assert "#2 (from #1, move num_warps:up): wrong" in user
    assert "- ROWS: [1, 2, 4, 8] (now 8)" in user
    assert spec_request.candidate.to_json() in user


def test_a_search_with_the_llm_proposer_finds_the_optimum(serve, llm_proposer, tmp_path):
    """The scripted model proposes the bowl's optimum from the seed and a step towards it
    from anything else; the synthetic measurer times them."""

    def script(body):
        user = body["messages"][-1]["content"]
        if 'candidate: {"knobs": {"block": 16,' in user:  # the seed is the node
            return answer(
                {"knobs": BOWL_OPTIMUM, "reason": "the optimum"}, {"knobs": {"block": 32}}
            )
        return answer()

    server = serve(script)
    space, measurer = bowl_search_parts()
    log_path = tmp_path / "search.jsonl"
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        proposer=llm_proposer(),
        budget=Budget(max_trials=10, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=None),
        log_path=str(log_path),
        progress=False,
    )
    assert not out.uses_fallback and dict(out.winner.knobs) == BOWL_OPTIMUM
    assert out.result.median_ms == bowl(BOWL_OPTIMUM) < bowl(BOWL_SEED)
    assert out.stop_reason == "exhausted"  # the model proposes nothing more
    assert len(server.requests) == 3  # seed, optimum, block 32
    events = [json.loads(line) for line in log_path.read_text().splitlines()]
    start, trials, end = events[0], events[1:-1], events[-1]
    assert start["proposer"] == "llm"
    assert [t["move"] for t in trials] == [
        "initial",
        "llm:knobs:block:up+num_warps:up+persistent=True+vector_width:up",
        "llm:knobs:block:up",
    ]
    stats = end["proposer_stats"]
    assert stats["requests"] == 3 and stats["prompt_tokens"] == 300
    assert stats["completion_tokens"] == 60 and stats["accepted"] == 2


def test_searches_log_only_their_own_counts(serve, llm_proposer, tmp_path):
    serve(lambda body: answer())
    proposer = llm_proposer()
    ends = []
    for i in range(2):
        space, measurer = bowl_search_parts()
        path = tmp_path / f"s{i}.jsonl"
        optimize(
            FakeSubgraph(),
            space=space,
            measurer=measurer,
            proposer=proposer,
            budget=Budget(max_trials=5, max_seconds=1e9),
            log_path=str(path),
            progress=False,
        )
        ends.append(json.loads(path.read_text().splitlines()[-1]))
    assert [e["proposer_stats"]["requests"] for e in ends] == [1, 1]
    assert proposer.stats()["requests"] == 2
