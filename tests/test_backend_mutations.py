"""A replaced subgraph in a graph that mutates its inputs (BatchNorm's running statistics):
the rewritten graph keeps its `return` last and its `copy_`s after the reads they follow, and
when Inductor cannot compile what kernelpro made, the user's compile still succeeds on the
fallback's own graph."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._inductor.compile_fx as compile_fx

from kernelpro_backend import make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.rewrite.graph import stable_topological_order
from kernelpro_backend.rewrite.providers import CallableKernel


class _LinearBatchNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 32)
        self.bn = torch.nn.BatchNorm1d(32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.bn(self.linear(x)) * 2.0, dim=1)


class _ReplaceReductions:
    """Replaces every reduction subgraph with its own reference module, as a kernel."""

    def find(self, subgraph):
        if subgraph.kind != "reduction":
            return None
        module = subgraph.module()
        return CallableKernel(f"ref-{subgraph.pattern}", lambda *xs: list(module(*xs)))


def _run(fallback: str, sessions: list):
    torch.manual_seed(0)
    ref, model = _LinearBatchNorm(), _LinearBatchNorm()
    model.load_state_dict(ref.state_dict())
    x = torch.randn(64, 16)
    backend = make_backend(provider=_ReplaceReductions(), sessions=sessions)
    compiled = torch.compile(model, backend=backend, options={"fallback": fallback})
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(compiled(x), ref(x), rtol=1e-5, atol=1e-6)
    return ref, model


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_running_statistics_update_when_their_subgraph_is_replaced(fallback):
    sessions: list[CompileSession] = []
    ref, model = _run(fallback, sessions)
    assert any(r.replaced for s in sessions for r in s.reports)
    torch.testing.assert_close(model.bn.running_mean, ref.bn.running_mean)
    torch.testing.assert_close(model.bn.running_var, ref.bn.running_var)
    assert model.bn.num_batches_tracked == ref.bn.num_batches_tracked == 2


def test_the_order_keeps_return_last_and_moves_only_what_must_move():
    graph = torch.fx.Graph()
    a = graph.placeholder("a")
    late = graph.call_function(torch.neg, (a,))
    early_user = graph.call_function(torch.exp, (a,))
    mutation = graph.call_function(torch.Tensor.copy_, (a, early_user))
    graph.output((early_user,))
    # a node inserted before its input, as a replaced subgraph's launch can be
    with graph.inserting_before(late):
        needs_later = graph.call_function(torch.add, (early_user, 1.0))
    stable_topological_order(graph)
    order = [n.name for n in graph.nodes]
    assert order[-1] == "output"
    assert order.index(early_user.name) < order.index(needs_later.name)
    assert order.index(late.name) < order.index(early_user.name) < order.index(mutation.name)
    graph.lint()


def test_a_graph_inductor_refuses_compiles_without_kernelpro_kernels(caplog, monkeypatch):
    real = compile_fx.compile_fx_inner

    def refusing_our_launches(gm, *args, **kwargs):
        if any("kernelpro" in str(n.target) for n in gm.graph.nodes):
            raise AssertionError("simulated Inductor failure on a kernelpro graph")
        return real(gm, *args, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", refusing_our_launches)
    sessions: list[CompileSession] = []
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        ref, model = _run("inductor", sessions)
    assert "compiling the graph without kernelpro's kernels" in caplog.text
    assert not any(r.replaced for s in sessions for r in s.reports)  # what ran replaced nothing
    torch.testing.assert_close(model.bn.running_mean, ref.bn.running_mean)
