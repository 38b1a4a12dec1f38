"""The dynamic-shape bench on CPU: every mode trains the whole schedule from the same weights,
compiles are counted, and kernelpro's share of dispatched calls is reported."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.bench.shapes import SCHEDULES, run_schedule, table
from kernelpro_backend.rewrite.providers import ReferenceProvider


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_a_schedule_runs_under_every_mode_and_reports_what_served_it(name):
    schedule = SCHEDULES[name](torch.device("cpu"), True)
    rows = run_schedule(
        schedule, modes=("eager", "kernelpro"), rounds=1,
        # The LM-head rewrite would leave no subgraph to serve: this test is about kernels.
        options={"fallback": "eager", "rewrite_linear_cross_entropy": False},
        provider=ReferenceProvider(),
    )  # fmt: skip
    eager, kp = rows
    assert len(eager.losses) == len(schedule.steps) == len(kp.losses)
    torch.testing.assert_close(kp.losses, eager.losses, rtol=1e-4, atol=1e-5)
    assert set(kp.step_ms) == {schedule.label(s) for s in schedule.steps}
    # One static compile, one symbolic recompile at the first change (not one per shape).
    assert 1 < kp.compiles < len(schedule.steps) and kp.recompiles_timed == 0
    assert kp.served["dispatched"] > 0 and kp.served["kernel_calls"] > 0
    assert "dispatched" in table(rows)


def test_the_lm_head_schedule_trains_through_the_chunked_op_as_tokens_vary():
    """The default LM-head rewrite under changing token counts: one static compile, one
    symbolic one, the losses of eager."""
    schedule = SCHEDULES["lm_head_tokens"](torch.device("cpu"), True)
    eager, kp = run_schedule(
        schedule, modes=("eager", "kernelpro"), rounds=1,
        options={"fallback": "eager"}, provider=ReferenceProvider(),
    )  # fmt: skip
    torch.testing.assert_close(kp.losses, eager.losses, rtol=1e-4, atol=1e-5)
    assert 1 < kp.compiles < len(schedule.steps) and kp.recompiles_timed == 0
