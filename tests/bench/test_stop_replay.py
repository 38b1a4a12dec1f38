"""bench/stop_replay.py: a logged search's reward trajectory replayed through today's stop rules
against the rules its log ran under."""

from __future__ import annotations

import json
import math

from kernelpro_backend.bench import stop_replay
from kernelpro_backend.search.budget import BEHIND


def test_the_replay_compares_today_s_rules_with_the_logged_ones(tmp_path, capsys):
    """A saved trajectory: the log's own rules (no "behind") ran it to trial 40; today's stop it
    at the end of its first full window."""
    budget = {"max_trials": 64, "max_seconds": 30.0, "plateau_trials": 8, "plateau_eps": 0.01}
    rewards = [math.log(0.45 + 0.0015 * i) for i in range(40)]  # +2.7% per window of 8
    t = {"key": "k", "pattern": "addmm", "budget": budget, "rewards": rewards}
    t |= {"elapsed_s": [0.5 * (i + 1) for i in range(40)], "ended": "plateau", "winner": "eager"}
    assert stop_replay.replay(t, behind_gap=None) == (40, None)
    assert stop_replay.replay(t) == (9, BEHIND)
    saved = tmp_path / "t.json"
    saved.write_text(json.dumps([t]))
    assert stop_replay.replay_report([saved]) == 0
    assert "behind 31 trials earlier (-15.5 s)" in capsys.readouterr().out
