"""How a search's give-up is reported and how big a timing graph is (the CUDA paths
themselves are in test_timing_gpu.py)."""

from kernelpro_backend.runtime.timing import GRAPH_TARGET_MS, Timing, _calls
from kernelpro_backend.runtime.worker import _abandoned


def test_a_give_up_says_which_runs_it_read():
    by_events = _abandoned(Timing(2.0, 0.1, (2.0,), "events-abandoned"), 1.5, {})
    by_replays = _abandoned(Timing(0.02, 0.001, (0.02,), "cuda_graph-abandoned"), 0.012, {})
    assert "in warm-up runs" in by_events.message
    assert "in first CUDA-graph replays" in by_replays.message
    for result in (by_events, by_replays):
        assert result.details["abandoned"] is True
        assert "not proved" in result.message


def test_a_graph_holds_about_the_target_time_of_calls():
    assert _calls(GRAPH_TARGET_MS / 10) == 10
    assert _calls(1e-6) == 200  # capped
    assert _calls(5.0) == 1
