"""SearchTree: same seed same tree, progressive and asymmetric widening, dead-end pruning,
ask/tell misuse."""

from __future__ import annotations

import json

import pytest
from synthetic import (
    BOWL_VALUES,
    FakeSubgraph,
    SyntheticMeasurer,
    SyntheticSpace,
    bowl_search_parts,
)

from kernelpro_backend.runtime.result import EvalStatus
from kernelpro_backend.search import Budget, RuleProposer, SearchTree, optimize

BUDGET = Budget(max_trials=40, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=None)


def serialized_tree(seed):
    space, measurer = bowl_search_parts()
    trees = []
    optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=BUDGET,
        seed=seed,
        batch_size=3,
        progress=False,
        tree_out=trees,
    )
    return json.dumps(trees[0].to_dict(), sort_keys=True)


def test_same_seed_gives_the_same_tree():
    a, b = serialized_tree(7), serialized_tree(7)
    assert a == b
    assert len(json.loads(a)["nodes"]) == 41  # root + 40 trials


def test_progressive_widening_limits_children_by_visits():
    space, measurer = bowl_search_parts()
    tree = SearchTree(FakeSubgraph(), space, RuleProposer(), reference_ms=2.0)
    for _ in range(30):
        [(node_id, candidate)] = tree.ask(1)
        parent = tree.nodes[tree.nodes[node_id].parent]
        if parent.id != 0:
            earlier = parent.children[:-1]
            pending = sum(1 for c in earlier if tree.nodes[c].pending)
            assert len(earlier) < tree.width_limit(parent.id, pending) or all(
                tree.nodes[c].closed for c in earlier
            )
        tree.tell(node_id, measurer.measure(None, [candidate])[0])
    widest = max(len(n.children) for n in tree.nodes[1:])
    assert widest < 8  # the seed alone has 7 legal neighbours: it was not expanded at once


def test_promising_nodes_widen_faster():
    space = SyntheticSpace({"x": (1, 2, 3, 4)}, [{"x": 1}, {"x": 4}])
    measurer = SyntheticMeasurer(lambda k: {1: 1.0, 4: 7.0}.get(k["x"], 3.0))
    tree = SearchTree(FakeSubgraph(), space, RuleProposer(), reference_ms=2.0)
    for node_id, cand in tree.ask(2):
        tree.tell(node_id, measurer.measure(None, [cand])[0])
    fast, slow = tree.nodes[1], tree.nodes[2]
    assert fast.visits == slow.visits == 1
    assert tree.width_limit(fast.id) > tree.width_limit(slow.id)


def layout_landscape(k):
    """Only layout "a" works; x trades time linearly (optimum x=0)."""
    return 1.0 + 0.1 * k["x"] if k["layout"] == "a" else EvalStatus.WRONG


def test_dead_ends_are_pruned():
    values = {"layout": ("a", "b", "c", "d", "e"), "x": tuple(range(10))}
    space = SyntheticSpace(values, [{"layout": "a", "x": 5}])
    measurer = SyntheticMeasurer(layout_landscape)
    trees = []
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        budget=Budget(max_trials=50, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=None),
        progress=False,
        tree_out=trees,
    )
    tree = trees[0]
    m = tree.params.dead_end_after
    assert dict(out.winner.knobs) == {"layout": "a", "x": 0}
    assert out.stop_reason == "exhausted" and out.trials < 50
    # the 10 x values each have 4 failing layouts (40 failures) if nothing were pruned; a move
    # that failed twice and never worked is not tried again in this search
    failures = [k for k in measurer.measured if k["layout"] != "a"]
    assert len(failures) <= tree.params.failing_move_after * 4
    assert out.tree["dead_ends"] >= 1
    for n in tree.nodes[1:]:
        if n.result is not None and not n.result.ok:
            assert n.children == [] and n.closed  # a failure without a fix is a closed leaf
        bad_run = longest = 0
        for c in n.children:
            child = tree.nodes[c]
            bad = child.result is not None and not child.result.ok
            bad_run = bad_run + 1 if bad else 0
            longest = max(longest, bad_run)
        assert longest <= m  # never more than m failures in a row under one node


def test_tell_rejects_unknown_or_repeated_nodes():
    space, measurer = bowl_search_parts()
    tree = SearchTree(FakeSubgraph(), space, RuleProposer(), reference_ms=2.0)
    [(node_id, cand)] = tree.ask(1)
    result = measurer.measure(None, [cand])[0]
    with pytest.raises(ValueError, match="not handed out"):
        tree.tell(node_id + 5, result)
    tree.tell(node_id, result)
    with pytest.raises(ValueError, match="already told"):
        tree.tell(node_id, result)


def test_no_seed_candidates_means_an_exhausted_tree_and_the_fallback():
    space = SyntheticSpace(BOWL_VALUES, [])
    out = optimize(
        FakeSubgraph(),
        space=space,
        measurer=SyntheticMeasurer(lambda k: 1.0),
        budget=BUDGET,
        progress=False,
    )
    assert out.trials == 0 and out.stop_reason == "exhausted" and out.winner == "inductor"


def test_proposers_see_the_history_with_failure_messages():
    space = SyntheticSpace({"num_warps": (1, 2, 4, 8)}, [{"num_warps": 2}])
    measurer = SyntheticMeasurer(lambda k: EvalStatus.COMPILE_ERROR if k["num_warps"] == 1 else 1.0)
    histories = []

    class Recording(RuleProposer):
        def propose(self, request):
            histories.append(request.history)
            return super().propose(request)

    optimize(
        FakeSubgraph(),
        space=space,
        measurer=measurer,
        proposer=Recording(),
        budget=Budget(max_trials=4, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=None),
        progress=False,
    )
    last = histories[-1]
    failed = [h for h in last if h["status"] == "compile_error"]
    assert [h["candidate"]["knobs"] for h in failed] == [{"num_warps": 1}]
    assert failed[0]["message"] == "synthetic failure at {'num_warps': 1}"
    assert failed[0]["median_ms"] is None and failed[0]["parent"] is not None
