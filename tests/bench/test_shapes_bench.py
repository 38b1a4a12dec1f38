"""The dynamic-shape bench on CPU: every mode trains the whole schedule from the same weights,
compiles are counted, and kernelpro's share of dispatched calls is reported."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.bench.shapes import SCHEDULES, run_schedule, table
from kernelpro_backend.providers import ReferenceProvider


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_a_schedule_runs_under_every_mode_and_reports_what_served_it(name):
    schedule = SCHEDULES[name](torch.device("cpu"), True)
    rows = run_schedule(
        schedule, modes=("eager", "kernelpro"), rounds=1,
        options={"fallback": "eager"}, provider=ReferenceProvider(),
    )  # fmt: skip
    eager, kp = rows
    assert len(eager.losses) == len(schedule.steps) == len(kp.losses)
    torch.testing.assert_close(kp.losses, eager.losses, rtol=1e-4, atol=1e-5)
    assert set(kp.step_ms) == {schedule.label(s) for s in schedule.steps}
    # One static compile, one symbolic recompile at the first change (not one per shape).
    assert 1 < kp.compiles < len(schedule.steps) and kp.recompiles_timed == 0
    assert kp.served["dispatched"] > 0 and kp.served["kernel_calls"] > 0
    assert "dispatched" in table(rows)
