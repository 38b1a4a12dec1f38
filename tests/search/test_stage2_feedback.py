"""Stage-2 findings steer the search: the ptxas spill finding the worker's feedback makes for a
spilling kernel (Triton metadata fixture of flawed_kernels.py's `spill` kernel) comes
back in the measurer's result, is logged with the tools that ran, and makes the rule proposer
expand the spill fixes first: the finding's own change (more warps share the tile), then the
spill rule's smaller tile, before the roofline class's rules."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from synthetic import FakeSubgraph, SyntheticSpace

import kernelpro_backend.runtime.feedback as feedback
from kernelpro_backend.profilers import Roofs
from kernelpro_backend.profilers.speed_of_light import Work
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import Budget, ProposalRequest, RuleProposer, optimize

FIXTURES = Path(__file__).resolve().parents[1] / "profilers" / "fixtures"
VALUES = {"BLOCK": (1024, 2048, 4096, 8192), "num_warps": (1, 2, 4, 8), "vector_width": (1, 4)}
SPILLING = {"BLOCK": 8192, "num_warps": 1, "vector_width": 4}  # the fixture kernel's knobs
N = 1 << 24
WORK = Work(tensor_flops=0.0, other_flops=3.0 * N, bytes=8 * N, tensor_dtype="")  # 45 us of SOL
PLAN = feedback.FeedbackPlan(Roofs(bytes_per_s=3.0e12, flops_per_s=67e12), tools=("ptxas",))


def compiled(spills: bool) -> types.SimpleNamespace:
    """A compiled Triton kernel as the ptxas tool reads it, from the fixture's metadata."""
    meta = json.loads((FIXTURES / "triton_meta_spill.json").read_text())
    return types.SimpleNamespace(
        name=meta["name"],
        n_regs=meta["n_regs"] if spills else 40,
        n_spills=meta["n_spills"] if spills else 0,
        metadata=types.SimpleNamespace(shared=meta["shared"], num_warps=meta["num_warps"]),
    )


class FeedbackMeasurer:
    """Times every candidate at 0.5 ms; the worker's feedback runs on a kernel that spills
    at 1 warp and fits in registers otherwise."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def baselines(self, subgraph):
        return {"inductor": EvalResult(EvalStatus.OK, median_ms=1.0, spread_ms=0.001)}

    def measure(self, subgraph, candidates):
        return [self.result(dict(c.knobs)) for c in candidates]

    def result(self, knobs):
        kernel = types.SimpleNamespace(spills=knobs["num_warps"] == 1)
        got = feedback.candidate_feedback(
            PLAN,
            kernel=kernel,
            candidate=None,
            measured_ms=0.5,
            work=WORK,
            inputs=(),
            knobs=knobs,
            element_bytes=4,
            workdir=self.workdir,
        )
        return EvalResult(
            EvalStatus.OK,
            median_ms=0.5,
            spread_ms=0.001,
            findings=got.findings,
            details=got.details(),
        )


@pytest.fixture
def measurer(monkeypatch, tmp_path):
    monkeypatch.setattr(feedback, "triton_kernels_of", lambda fn: [compiled(fn.spills)])
    return FeedbackMeasurer(tmp_path)


def test_the_spill_finding_reaches_the_proposer_and_its_fixes_come_first(measurer):
    result = measurer.result(SPILLING)
    spill = [f for f in result.findings if f.metric == "spill_bytes"]
    assert spill and spill[0].tool == "ptxas" and spill[0].value == 26
    assert result.details["tools_run"] == ["ptxas"]
    space = SyntheticSpace(VALUES, [SPILLING])
    request = ProposalRequest(
        subgraph=FakeSubgraph(kind="pointwise", pattern="spill"),
        candidate=space.spec(**SPILLING),
        result=result,
        space=space,
        history=(),
        move_prior=lambda move: 0.0,
        is_known=lambda c: False,
    )
    proposals = RuleProposer().propose(request)
    first = [(p.move, p.reason) for p in proposals[:2]]
    assert first == [
        ("num_warps:up", "finding:ptxas/spill_bytes"),  # the tool's fix: 4 warps share the tile
        ("BLOCK:down", "finding:ptxas/spill_bytes"),  # the spill rule: a smaller tile
    ]
    assert dict(proposals[0].candidate.knobs)["num_warps"] == 4
    # the spill rule's other fix: the tile over 8 warps; then the roofline class's rules
    assert (proposals[2].move, proposals[2].reason) == ("num_warps:up", "finding:ptxas/spill_bytes")
    assert dict(proposals[2].candidate.knobs)["num_warps"] == 8
    assert proposals[3].reason.startswith("roofline:")


def test_the_search_expands_the_spill_fix_and_logs_the_tools(measurer, tmp_path):
    log = tmp_path / "search.jsonl"
    optimize(
        FakeSubgraph(kind="pointwise", pattern="spill"),
        space=SyntheticSpace(VALUES, [SPILLING]),
        measurer=measurer,
        budget=Budget(max_trials=2, max_seconds=60),
        log_path=str(log),
        progress=False,
    )
    trials = [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "trial"]
    root, child = trials
    assert root["tools_run"] == ["ptxas"] and root["tools_skipped"] == []
    assert ("ptxas", "spill_bytes") in {(f["tool"], f["metric"]) for f in root["findings"]}
    assert child["reason"] == "finding:ptxas/spill_bytes" and child["move"] == "num_warps:up"
    assert "spill_bytes" not in {f["metric"] for f in child["findings"]}  # 4 warps: no spill
