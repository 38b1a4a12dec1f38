"""Search memory: records persist across instances, corrupt lines are skipped, concurrent appends
keep whole lines, and a second search orders its moves by what worked in the first."""

from __future__ import annotations

import json
import logging
import threading

from synthetic import FakeSubgraph, SyntheticMeasurer, SyntheticSpace

from kernelpro_backend.search import Budget, MoveRecord, SearchMemory, default_memory_path, optimize


def test_records_persist_and_prior_weighs_similar_subgraphs(tmp_path):
    path = tmp_path / "mem" / "search_memory.jsonl"
    mem = SearchMemory(path)
    mem.record(MoveRecord("reduction", "softmax", "memory-bound", "vector_width:up", 0.4))
    mem.record(MoveRecord("reduction", "rms_norm", "memory-bound", "num_warps:up", 0.4))
    mem.record(MoveRecord("gemm", "mm", "compute-bound", "vector_width:up", -1.0))
    again = SearchMemory(path)
    assert len(again) == 3
    same_pattern = again.prior("reduction", "softmax", "memory-bound", "vector_width:up")
    same_kind = again.prior("reduction", "softmax", "memory-bound", "num_warps:up")
    assert same_pattern == 0.4 / (1.0 + 1.0)  # one record, shrunk by one pseudo-record
    assert 0 < same_kind < same_pattern  # other pattern of the same kind counts less
    assert again.prior("pointwise", "add", None, "vector_width:up") == 0.0  # other kind: nothing
    assert default_memory_path(tmp_path).name == "search_memory.jsonl"


def test_corrupt_lines_are_skipped_with_a_log_line(tmp_path, caplog):
    path = tmp_path / "search_memory.jsonl"
    good = MoveRecord("reduction", "softmax", None, "block:up", 0.1).to_json()
    path.write_text(good + "\n{not json\n" + json.dumps({"kind": "x"}) + "\n" + good + "\n")
    with caplog.at_level(logging.WARNING):
        mem = SearchMemory(path)
    assert len(mem) == 2
    assert sum("corrupt" in r.message for r in caplog.records) == 2


def test_concurrent_appends_keep_whole_lines(tmp_path):
    path = tmp_path / "search_memory.jsonl"

    def writer(i):
        mem = SearchMemory(path)
        for j in range(200):
            mem.record(MoveRecord("reduction", "softmax", None, f"m{i}", j / 1000))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 800
    assert all(MoveRecord.from_dict(json.loads(line)) for line in lines)


# vector width is what matters here; block size changes are slightly harmful
VALUES = {"block": (16, 32, 64, 128, 256), "vector_width": (1, 2, 4, 8, 16)}


def vector_landscape(k):
    return 0.5 + 4.0 / k["vector_width"] + 0.01 * abs(k["block"] - 64) / 16


def first_move_of_seed(memory, seed_knobs):
    trees = []
    optimize(
        FakeSubgraph(),
        space=SyntheticSpace(VALUES, [seed_knobs]),
        measurer=SyntheticMeasurer(vector_landscape, baselines={"inductor": 4.0}),
        budget=Budget(max_trials=4, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=None),
        memory=memory,
        progress=False,
        tree_out=trees,
    )
    tree = trees[0]
    seed_node = tree.nodes[tree.nodes[0].children[0]]
    return tree.nodes[seed_node.children[0]].move


def test_memory_changes_the_order_of_moves_on_a_second_search(tmp_path):
    path = tmp_path / "search_memory.jsonl"
    first = SearchMemory(path)
    optimize(
        FakeSubgraph(),
        space=SyntheticSpace(VALUES, [{"block": 64, "vector_width": 1}]),
        measurer=SyntheticMeasurer(vector_landscape, baselines={"inductor": 4.0}),
        budget=Budget(max_trials=20, max_seconds=1e9, sol_stop_fraction=None, plateau_trials=None),
        memory=first,
        progress=False,
    )
    assert len(first) > 0
    other_seed = {"block": 32, "vector_width": 2}
    # without memory, neighbours come in knob-name order: block first
    assert first_move_of_seed(SearchMemory(None), other_seed) == "block:down"
    # a later run (fresh object, same file) tries the move that gained before
    assert first_move_of_seed(SearchMemory(path), other_seed) == "vector_width:up"
