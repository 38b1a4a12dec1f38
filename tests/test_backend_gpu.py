"""The backend on CUDA: training matches eager, with and without replaced subgraphs."""

from __future__ import annotations

import pytest
import torch
from helpers import train

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.rewrite.providers import ReferenceProvider

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("provider", [None, "reference"])
@pytest.mark.parametrize("fallback", ["inductor", "eager"])
@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_training_on_cuda_matches_eager(name, fallback, provider):
    model_ref, (x,) = examples.EXAMPLES[name]("cuda")
    model, _ = examples.EXAMPLES[name]("cuda")
    ref_losses, ref_grads = train(model_ref, x)
    sessions: list[CompileSession] = []
    prov = ReferenceProvider() if provider else None
    losses, grads = train(
        model,
        x,
        lambda m: torch.compile(
            m,
            backend=make_backend(provider=prov, sessions=sessions),
            options={"fallback": fallback},
        ),
    )
    # Inductor may reorder float32 reductions: compare at float32 tolerance, not bitwise.
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-5)
    replaced = sum(len(r.replaced) for s in sessions for r in s.reports)
    assert (replaced > 0) == bool(provider)
