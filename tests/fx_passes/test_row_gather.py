"""Row gathers: cross-entropy's `logp.gather(-1, target[:, None])` joins the row-reduction group
that computes the log-probabilities, so they never leave the kernel; every other gather (other
dims, wider or smaller indices, sources outside a row group), index_select and scatter stays
with the fallback. Rebuilding the fused subgraph from its text gives the same key and ranges."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from helpers import subgraphs_of
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.utils.fuser_utils import validate_partition

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes import IntRange, Subgraph, partition, rebuild_subgraph
from kernelpro_backend.fx_passes.ops import Role, role

N, V = 37, 50


class CrossEntropy(torch.nn.Module):
    def __init__(self, **kwargs: object) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target, **self.kwargs)  # type: ignore[arg-type]


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(N, V, requires_grad=True), torch.randint(0, V, (N,))


def _with_gather(subgraphs: list[Subgraph]) -> list[Subgraph]:
    return [s for s in subgraphs if "gather" in s.ops]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"ignore_index": 3},
        {"label_smoothing": 0.0},
        {"reduction": "sum"},
        {"reduction": "none"},
    ],
    ids=str,
)
def test_cross_entropy_forward_picks_the_target_inside_the_row_kernel(kwargs: dict) -> None:
    sgs = subgraphs_of(CrossEntropy(**kwargs), *_inputs())
    assert {s.graph for s in sgs} == {"forward", "backward"}  # the backward still compiles
    fused = _with_gather(sgs)
    assert len(fused) == 1
    sg = fused[0]
    assert sg.graph == "forward" and sg.kind == "reduction" and sg.pattern == "cross_entropy"
    assert {"amax", "sub", "exp", "sum", "log", "gather"} <= set(sg.ops)
    # the [N, V] log-probabilities are no output: only per-row values leave the kernel
    assert all(shape != (N, V) for shape, _, _ in sg.output_meta), sg.output_meta
    assert [shape for shape, _, _ in sg.input_meta if len(shape) == 2] == [(N, V)]
    # the target is read as-is (ignore_index select fused too) and drawn as a valid class index
    assert list(sg.int_ranges.values()) == [IntRange(0, V)]
    # the mean over rows reduces across the kernel's rows: a subgraph of its own
    assert all(shape[0] == N for shape, _, _ in sg.output_meta)


def test_bench_cross_entropy_reads_the_logits_once_and_writes_no_log_probs() -> None:
    from kernelpro_backend.bench.sol import workload_subgraphs
    from kernelpro_backend.bench.workloads import WORKLOADS

    w = WORKLOADS["cross_entropy"](torch.device("cpu"), torch.bfloat16, "tiny")
    sgs = workload_subgraphs(w)
    (logits,) = w.inputs[:1]
    full = tuple(logits.shape)
    readers = [s for s in sgs if any(shape == full for shape, _, _ in s.input_meta)]
    assert len(readers) == 1 and readers[0].pattern == "cross_entropy"
    assert not any(shape == full for s in sgs for shape, _, _ in s.output_meta)


def test_log_probs_returned_by_the_model_stay_an_output() -> None:
    class LossAndLogProbs(torch.nn.Module):
        def forward(self, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
            logp = x.log_softmax(-1)
            return F.nll_loss(logp, t), logp

    found: list[Subgraph] = []
    compiled = torch.compile(
        LossAndLogProbs(),
        backend=make_backend(observer=lambda kind, sgs: found.extend(sgs)),
        options={"fallback": "eager", "search": "off"},
    )
    x, t = _inputs()
    loss, logp = compiled(x, t)
    (loss + logp.sum()).backward()
    (sg,) = _with_gather(found)
    assert sg.pattern == "cross_entropy"
    assert (N, V) in [shape for shape, _, _ in sg.output_meta]  # still written: it is returned
    assert (N, 1) in [shape for shape, _, _ in sg.output_meta]  # and the picked log-prob


_OTHER_GATHERS: dict[str, Callable[..., torch.Tensor]] = {
    "along dim 0": lambda x, t: x.log_softmax(-1).gather(0, t[None, :] % N),
    "two per row": lambda x, t: x.log_softmax(-1).gather(-1, torch.stack([t, t], -1)),
    "fewer rows": lambda x, t: x.log_softmax(-1).gather(-1, t[:5, None]),
    "source outside a group": lambda x, t: x.gather(-1, t[:, None]) * 2,
    "column softmax source": lambda x, t: x.softmax(0).gather(-1, t[:, None]),
    "index_select": lambda x, t: x.log_softmax(-1).index_select(-1, t[:3]),
    "scatter": lambda x, t: x.log_softmax(-1).scatter(-1, t[:, None], 0.0),
}


@pytest.mark.parametrize("name", list(_OTHER_GATHERS))
def test_other_gathers_stay_with_the_fallback(name: str) -> None:
    x, t = _inputs()
    sgs = subgraphs_of(Fn(_OTHER_GATHERS[name]), x.detach(), t, train=False)
    ops = {op for s in sgs for op in s.ops}
    assert not ops & {"gather", "index_select", "scatter"}, [s.ops for s in sgs]


def test_roles_of_gathers() -> None:
    def fn(x: torch.Tensor, t: torch.Tensor, t3: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x.gather(-1, t[:, None]),  # row gather
            x.gather(1, t[:, None]),  # the same, dim spelled positively
            x.gather(0, t[None, :V] % N),  # other dim
            x.gather(-1, t3),  # three per row
            x.gather(-1, t[:5, None]),  # fewer rows than the source
        )

    x, t = torch.randn(N, V), torch.randint(0, V, (N,))
    gm = make_fx(fn, tracing_mode="fake")(x, t, torch.randint(0, V, (N, 3)))
    roles = [role(n) for n in gm.graph.nodes if "gather" in str(n.target)]
    assert roles == [Role.ROW_GATHER, Role.ROW_GATHER, Role.OTHER, Role.OTHER, Role.OTHER]


def test_fused_groups_are_convex_and_rebuild_to_the_same_key() -> None:
    graphs: list[torch.fx.GraphModule] = []
    from kernelpro_backend.rewrite import graph as rewrite

    original = rewrite.find_subgraphs

    def spy(gm, kind, precision):  # type: ignore[no-untyped-def]
        graphs.append(gm)
        return original(gm, kind, precision)

    rewrite.find_subgraphs = spy
    try:
        sgs = subgraphs_of(CrossEntropy(label_smoothing=0.1), *_inputs())
    finally:
        rewrite.find_subgraphs = original
    for gm in graphs:
        for g in partition(gm.graph):
            assert validate_partition(list(g.nodes))
            assert all(role(n) is not Role.OTHER for n in g.nodes)
    (sg,) = _with_gather(sgs)
    rebuilt = rebuild_subgraph(sg.text, sg.key, sg.kind, sg.pattern)
    assert rebuilt.int_ranges == sg.int_ranges
    assert list(rebuilt.int_ranges.values()) == [IntRange(0, V)]
    inputs = sg.make_inputs(3)
    for got, want in zip(rebuilt.module()(*inputs), sg.module()(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


class LMHead(torch.nn.Module):
    """The last layer of a language model and its loss: the logits never leave the graph."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.head = torch.nn.Linear(16, vocab, bias=False)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(x), target)


def test_a_vocabulary_wider_than_a_gemm_tile_keeps_the_gemm_and_the_loss_apart() -> None:
    """An LM head's row reductions over its vocabulary used to join the head GEMM's epilogue,
    which no GEMM tile can hold: the whole group, GEMM included, fell back. Now the GEMM is a
    group of its own and the loss a fused row kernel, and both lower."""
    from kernelpro_backend.lowering import lower

    vocab = 1000
    sgs = subgraphs_of(LMHead(vocab), torch.randn(N, 16), torch.randint(0, vocab, (N,)))
    forward = [s for s in sgs if s.graph == "forward"]
    gemm = [s for s in forward if s.kind == "gemm"]
    assert len(gemm) == 1 and "amax" not in gemm[0].ops
    (loss,) = _with_gather(forward)
    assert loss.pattern == "cross_entropy" and loss.kind == "reduction"
    for sg in (gemm[0], loss):
        lower(sg)  # raises Unsupported if a template cannot take it


def test_a_narrow_head_still_reduces_its_rows_in_the_gemm_epilogue() -> None:
    sgs = subgraphs_of(LMHead(200), torch.randn(N, 16), torch.randint(0, 200, (N,)))
    fused = [s for s in sgs if s.graph == "forward" and s.kind == "gemm" and "amax" in s.ops]
    assert len(fused) == 1


def test_the_partition_limit_is_codegen_widest_gemm_tile() -> None:
    from kernelpro_backend.codegen.knobs import _SPACE
    from kernelpro_backend.fx_passes.partition import MAX_GEMM_EPILOGUE_ROW

    assert max(_SPACE["gemm"]["BLOCK_N"]) == MAX_GEMM_EPILOGUE_ROW  # type: ignore[type-var]
