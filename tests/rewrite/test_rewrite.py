"""The rewrite: subgraphs with a kernel run through the opaque kernelpro::launch op."""

from __future__ import annotations

import pytest
import torch
from helpers import train

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.rewrite.launch import KERNELS
from kernelpro_backend.rewrite.providers import CallableKernel, ReferenceProvider


def _calls(sessions):
    return {kid: KERNELS.calls(kid) for s in sessions for r in s.reports for kid in r.replaced}


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_replaced_subgraphs_run_through_the_op(name, fallback):
    model_ref, (x,) = examples.EXAMPLES[name]("cpu")
    model, _ = examples.EXAMPLES[name]("cpu")
    ref_losses, ref_grads = train(model_ref, x)
    provider = ReferenceProvider()
    sessions: list[CompileSession] = []
    backend = make_backend(provider=provider, sessions=sessions)
    losses, grads = train(
        model, x, lambda m: torch.compile(m, backend=backend, options={"fallback": fallback})
    )
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    replaced = {r.graph: r.replaced for s in sessions for r in s.reports}
    assert replaced["forward"] and replaced["backward"]
    # Every replaced kernel ran once per step (3 steps); compiling registers kernels afresh
    # (count 0), and kernels with the same key may be shared between subgraphs, hence >= 3.
    for kid, n in _calls(sessions).items():
        assert n >= 3, kid


def test_only_chosen_kinds_are_replaced():
    model, (x,) = examples.transformer_block("cpu")
    provider = ReferenceProvider(kinds=["reduction"])
    sessions: list[CompileSession] = []
    compiled = torch.compile(
        model,
        backend=make_backend(provider=provider, sessions=sessions),
        options={"fallback": "eager"},
    )
    compiled(x).sum().backward()
    assert provider.provided and all(s.kind == "reduction" for s in provider.provided)
    n_replaced = sum(len(r.replaced) for s in sessions for r in s.reports)
    assert n_replaced == len(provider.provided)


def test_kernel_with_wrong_layout_is_conformed():
    """A kernel may return contiguous outputs; the op restrides them to the promised layout."""

    class M(torch.nn.Module):
        def forward(self, x):
            return (x * 2).t().contiguous().t() + 1

    x = torch.randn(6, 5)

    class Contiguous:
        def find(self, sg):
            module = sg.module()
            return CallableKernel("contig", lambda *a: [o.contiguous() for o in module(*a)])

    with torch.no_grad():
        out = torch.compile(
            M(), backend=make_backend(provider=Contiguous()), options={"fallback": "eager"}
        )(x)
    torch.testing.assert_close(out, M()(x))


def test_wrong_output_shape_is_an_error():
    class Bad:
        def find(self, sg):
            return CallableKernel("bad", lambda *a: [torch.zeros(1) for _ in sg.outputs])

    class M(torch.nn.Module):
        def forward(self, x):
            return x.exp() * 3

    with pytest.raises(Exception, match="kernel returned shape"), torch.no_grad():
        torch.compile(M(), backend=make_backend(provider=Bad()), options={"fallback": "eager"})(
            torch.randn(4)
        )
