"""`kernelpro warmup`: the default deadline (a corpus model within 10 minutes), --deadline-s 0
for none, and --json with the phases' seconds and the plan's counts."""

from __future__ import annotations

import json

import pytest
import torch

import kernelpro_backend.warmup.offline as offline
from kernelpro_backend.cli import warmup as cli_warmup
from kernelpro_backend.warmup.report import WarmupReport
from kernelpro_backend.warmup.rows import WarmupRow

from .conftest import run_cli


def build():
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)


REPORT = WarmupReport(
    rows=[WarmupRow("forward", "softmax", "abc123", "kernel", 12.5, count=24, note="found")],
    seconds=300.0,
    phases={"collect": 20.0, "search": 200.0, "cutlass": 0.0, "check": 80.0},
    plan={
        "distinct": 1, "occurrences": 24, "planned": 1, "searched": 1, "found": 1,
        "skipped": 0, "not_reached": 0, "below_floor": 0, "cached": 0, "searched_before": 0,
        "not_selected": 0, "floor_us": 2.0, "basis": "roofline", "not_reached_items": [],
    },
)  # fmt: skip


@pytest.fixture
def seen(monkeypatch):
    got: dict = {}

    def fake_warmup(model, inputs, **kw):
        got.update(kw)
        return REPORT

    monkeypatch.setattr(offline, "search_provider", lambda options: object())
    monkeypatch.setattr(offline, "warmup", fake_warmup)
    return got


def test_the_default_deadline_fits_a_corpus_model_in_ten_minutes(seen):
    assert run_cli("warmup", f"{__name__}:build") == 0
    assert seen["deadline_s"] == offline.DEFAULT_DEADLINE_S == cli_warmup.DEFAULT_DEADLINE_S
    assert seen["deadline_s"] < 600
    assert run_cli("warmup", f"{__name__}:build", "--deadline-s", "0") == 0
    assert seen["deadline_s"] is None
    assert run_cli("warmup", f"{__name__}:build", "--deadline-s", "90") == 0
    assert seen["deadline_s"] == 90.0


def test_the_summary_shows_the_phases_as_a_table_and_as_json(seen, capsys):
    assert run_cli("warmup", f"{__name__}:build") == 0
    table = capsys.readouterr().out
    assert "phases: collecting subgraphs 20.0 s, searching 200.0 s" in table
    assert "in-context check 80.0 s; 300 s in all" in table
    assert "24 subgraphs, 24 with a kernel" in table
    assert run_cli("warmup", f"{__name__}:build", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["phases"] == {"collect": 20.0, "search": 200.0, "cutlass": 0.0, "check": 80.0}
    assert out["plan"]["found"] == 1 and out["rows"][0]["count"] == 24
