"""RuleProposer: findings' suggestions first, then cause and bottleneck-class rules, then
one-knob neighbours; illegal, duplicate and policy-forbidden changes are never proposed."""

from __future__ import annotations

from synthetic import FakeSubgraph, SyntheticSpace

from kernelpro_backend.profilers.findings import Bottleneck, Finding, Severity
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import ProposalRequest, RuleProposer

VALUES = {
    "block_m": (16, 32, 64, 128),
    "block_n": (16, 32, 64, 128),
    "num_warps": (1, 2, 4, 8),
    "num_stages": (1, 2, 3, 4),
    "split_k": (1, 2, 4),
    "vector_width": (1, 2, 4, 8),
    "rows_per_program": (1, 2, 4),
    "persistent": (False, True),
    "precision": ("ieee", "tf32x3", "tf32"),
}
MID = {
    "block_m": 32,
    "block_n": 32,
    "num_warps": 4,
    "num_stages": 3,
    "split_k": 2,
    "vector_width": 2,
    "rows_per_program": 2,
    "persistent": False,
    "precision": "ieee",
}


def roofline(b: Bottleneck) -> Finding:
    return Finding("roofline", "bottleneck", b.value, None, Severity.HIGH, "class")


def request(
    findings=(), *, status=EvalStatus.OK, precision="ieee", legal=None, known=(), prior=None
):
    space = SyntheticSpace(VALUES, [MID], legal or (lambda k: True))
    parent = space.spec(**MID)
    ok = status is EvalStatus.OK
    return ProposalRequest(
        subgraph=FakeSubgraph(kind="gemm", pattern="mm", precision=precision),
        candidate=parent,
        result=EvalResult(status, median_ms=1.0 if ok else None, findings=tuple(findings)),
        space=space,
        history=(),
        move_prior=prior or (lambda move: 0.0),
        is_known=lambda c: c in known,
    )


def moves(req, reason_prefix=None):
    props = RuleProposer().propose(req)
    return [p.move for p in props if reason_prefix is None or p.reason.startswith(reason_prefix)]


def test_memory_bound_widens_vectors_rows_and_goes_persistent_first():
    got = moves(request([roofline(Bottleneck.MEMORY)]))
    assert got[:3] == ["vector_width:up", "rows_per_program:up", "persistent=True"]


def test_latency_bound_adds_parallelism():
    got = moves(request([roofline(Bottleneck.LATENCY)]), "roofline")
    assert got == [
        "split_k:up",
        "block_m:down",
        "block_n:down",
        "rows_per_program:down",
        "num_warps:down",
    ]


def test_compute_bound_grows_tiles_and_stages_and_respects_precision_policy():
    ieee = moves(request([roofline(Bottleneck.COMPUTE)]))
    assert ieee[:3] == ["block_m:up", "block_n:up", "num_stages:up"]
    assert not any(m.startswith("precision") for m in ieee)  # not even as a neighbour
    tf32 = moves(request([roofline(Bottleneck.COMPUTE)], precision="tf32"), "roofline")
    assert "precision=tf32" in tf32
    tf32x3 = moves(request([roofline(Bottleneck.COMPUTE)], precision="tf32x3"))
    assert "precision=tf32x3" in tf32x3 and "precision=tf32" not in tf32x3


def test_spills_shrink_tiles_and_spread_them_over_8_warps_before_the_class_rules():
    spill = Finding("ptxas", "spill_bytes", 128.0, 0.0, Severity.HIGH, "registers spill")
    got = moves(request([spill, roofline(Bottleneck.MEMORY)]))
    # fewer warps would hold more per thread: never a spill fix below 16 warps
    assert got[:3] == ["block_m:down", "block_n:down", "num_warps:up"]
    assert got[3] == "vector_width:up"


def test_spills_slice_the_epilogue_before_shrinking_the_tile():
    values = {**VALUES, "epilogue_subtile": (1, 2, 4)}
    space = SyntheticSpace(values, [{**MID, "epilogue_subtile": 1}])
    spill = Finding("ptxas", "spill_bytes", 56.0, 0.0, Severity.HIGH, "registers spill")
    req = ProposalRequest(
        subgraph=FakeSubgraph(kind="gemm", pattern="addmm+epilogue", precision="ieee"),
        candidate=space.spec(**MID, epilogue_subtile=1),
        result=EvalResult(EvalStatus.OK, median_ms=1.0, findings=(spill,)),
        space=space, history=(), move_prior=lambda move: 0.0, is_known=lambda c: False,
    )  # fmt: skip
    assert moves(req)[:2] == ["epilogue_subtile:up", "block_m:down"]


def test_shared_memory_limited_occupancy_means_fewer_stages():
    smem = Finding("ncu", "occupancy_limiter", "shared_memory", None, Severity.MEDIUM, "smem")
    assert moves(request([smem]))[0] == "num_stages:down"


def test_finding_suggestions_come_first():
    suggestion = Finding(
        "ncu", "stall_long_scoreboard", 0.4, 0.2, Severity.MEDIUM, "x", (("num_stages", 2),)
    )
    props = RuleProposer().propose(request([roofline(Bottleneck.MEMORY), suggestion]))
    assert props[0].move == "num_stages:down"
    assert props[0].reason == "finding:ncu/stall_long_scoreboard"


def test_illegal_and_known_children_are_skipped_and_no_duplicates():
    def legal(k):
        return k["block_m"] * k["block_n"] <= 32 * 32

    space = SyntheticSpace(VALUES, [MID])
    known = {space.spec(**{**MID, "vector_width": 4})}
    props = RuleProposer().propose(
        request(
            [roofline(Bottleneck.COMPUTE), roofline(Bottleneck.MEMORY)], legal=legal, known=known
        )
    )
    got = [p.move for p in props]
    assert "block_m:up" not in got and "block_n:up" not in got  # 64x32 > 32x32: illegal
    assert "vector_width:up" not in got  # already in the tree
    assert len({p.candidate for p in props}) == len(props)
    assert all(legal(dict(p.candidate.knobs)) for p in props)


def test_failed_candidate_gets_only_its_suggested_fix():
    fix = Finding(
        "ptxas", "shared_memory_bytes", 300e3, 227e3, Severity.HIGH, "x", (("num_stages", 2),)
    )
    assert moves(request([fix], status=EvalStatus.COMPILE_ERROR)) == ["num_stages:down"]
    assert moves(request([], status=EvalStatus.WRONG)) == []


def test_memory_prior_reorders_moves():
    plain = moves(request([]))
    assert plain[0] == "block_m:down"  # neighbours in knob-name order when nothing is known
    remembered = moves(request([], prior=lambda m: 0.3 if m == "vector_width:up" else 0.0))
    assert remembered[0] == "vector_width:up"


def test_energy_moves_are_proposed_only_under_the_energy_objective():
    req = request([roofline(Bottleneck.MEMORY)])
    energy = [p for p in RuleProposer(objective="energy").propose(req)]
    tagged = [p.move for p in energy if p.reason == "objective:energy"]
    # fewer warps and stages, fewer splits (a smaller cluster), larger tiles
    assert tagged == [
        "num_warps:down",
        "num_stages:down",
        "split_k:down",
        "block_m:up",
        "block_n:up",
    ]
    # ranked with the rules, ahead of the one-knob neighbours
    first_neighbour = next(i for i, p in enumerate(energy) if p.reason == "neighbour")
    assert all(energy.index(p) < first_neighbour for p in energy if p.reason == "objective:energy")
    assert not any(p.reason == "objective:energy" for p in RuleProposer().propose(req))
    # a failed candidate gets no energy moves (nothing was measured to save on)
    failed = request(status=EvalStatus.COMPILE_ERROR)
    assert not RuleProposer(objective="energy").propose(failed)
