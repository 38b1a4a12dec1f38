"""The reference a bench mode is checked against (bench/check/reference.py)."""

import torch

CPU = torch.device("cpu")


def test_a_step_under_autocast_is_checked_against_its_float32_run_when_float64_does_not_fit(
    monkeypatch,
):
    """A corpus step (bf16 autocast, float32 weights) whose float64 run does not fit gets its
    float32 run without autocast as the reference; a step with no autocast gets none."""
    import copy
    from types import SimpleNamespace

    from kernelpro_backend.bench.check import reference

    class Step(torch.nn.Module):
        def __init__(self, autocast):
            super().__init__()
            self.lin, self.autocast = torch.nn.Linear(8, 8), autocast

        def forward(self, x):
            if self.autocast is None:
                return self.lin(x)
            with torch.autocast("cpu", dtype=self.autocast):
                return self.lin(x)

    def no_room(workload):
        raise torch.OutOfMemoryError("CUDA out of memory (test)")

    monkeypatch.setattr(reference, "fp64_reference", no_room)
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    for autocast in (torch.bfloat16, None):
        base = Step(autocast)
        workload = SimpleNamespace(
            name="step", fresh_model=lambda b=base: copy.deepcopy(b), inputs=(x,), loss_fn=None,
            device=CPU,
        )  # fmt: skip
        ref, why = reference.fp64_or_none(workload)
        if autocast is None:
            assert ref is None and why == " (no float64 reference: out of memory)"
            continue
        assert "float32 without autocast" in why
        (out,) = ref.values()
        assert out.dtype == torch.float32 and base(x).dtype == torch.bfloat16
        torch.testing.assert_close(out, base.lin(x), rtol=0, atol=0)
