"""The fused cross-entropy kernel: the row gather lowered as a masked reduction of the row
template (and of the GEMM epilogue), under Triton's interpreter against the reference subgraph -
odd shapes, a row in one block and a row looped over blocks, float32 and bfloat16, targets
equal to ignore_index; the gather is exact selection (-0.0, infinities and NaN picked as they
are); and models compiled through the backend with these kernels train like eager."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from harness import check, collect, traced_subgraph
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend import make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.codegen import Unsupported, build, render
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.lowering import lower

DTYPES = [torch.float32, torch.bfloat16]


class CrossEntropy(nn.Module):
    def __init__(self, **kwargs: object) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target, **self.kwargs)  # type: ignore[arg-type]


def _fused(
    n: int, v: int, dtype: torch.dtype, train: bool = True, device: str = "cpu", **kwargs: object
) -> Subgraph:
    logits = torch.randn(n, v, dtype=dtype, device=device, requires_grad=train)
    target = torch.randint(0, v, (n,), device=device)
    sgs = collect(CrossEntropy(**kwargs), (logits, target), train=train)
    (sg,) = [s for s in sgs if "gather" in s.ops]
    return sg


def _passes(source: str) -> int:
    return source.count("for c0 in range(")


def _with_ignored_targets(sg: Subgraph, seed: int) -> list[torch.Tensor]:
    inputs = sg.make_inputs(seed)
    (target,) = sg.int_ranges  # the class-index input
    inputs[target][::3] = -100  # F.cross_entropy's default ignore_index
    return inputs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("v", [1000, 50])
@pytest.mark.parametrize("train", [True, False], ids=["forward", "inference"])
def test_fused_cross_entropy_matches_in_one_block_and_looped(
    v: int, dtype: torch.dtype, train: bool
) -> None:
    sg = _fused(37, v, dtype, train)
    spec = lower(sg)
    assert spec.template == "row_reduction" and spec.pattern == "cross_entropy"
    assert [op for op, _, _ in spec.ops].count("gather") == 1
    assert int(spec.knob("BLOCK_C")) >= v  # the default: the whole row in one block
    assert _passes(render(spec).source) == 0
    check(sg, spec, seed=1)
    check(sg, spec, inputs=_with_ignored_targets(sg, 2))
    for block_c in (16, 32 if v < 128 else 128):  # rows of 2 to 63 blocks
        looped = spec.with_knobs(BLOCK_C=block_c, ROWS=2, num_warps=1)
        # one pass: the row max, the target pick and the sum of exponentials rescaled as
        # the max grows (online log-sum-exp); the log-probabilities are never formed
        assert _passes(render(looped).source) == 1
        check(sg, looped, seed=3)
        check(sg, looped, inputs=_with_ignored_targets(sg, 4))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_gradient_computes_its_column_index_instead_of_loading_it(dtype: torch.dtype) -> None:
    """The gradient's one-hot compares each column with the target through prims.iota; the
    iota is part of the subgraph (an "index" op: the element's column), not an int64 input
    that every row reads again (and that validation filled with random integers), and the
    target's valid range is the iota's length; in one block and looped, with ignored targets."""
    logits = torch.randn(37, 1000, dtype=dtype, requires_grad=True)
    target = torch.randint(0, 1000, (37,))
    (sg,) = [s for s in collect(CrossEntropy(), (logits, target)) if s.graph.startswith("backward")]
    assert all(
        dt != "int64" or len(shape) == 1 and shape[0] == 37 for shape, _, dt in sg.input_meta
    )
    spec = lower(sg)
    (index,) = [args for op, args, _ in spec.ops if op == "index"]
    assert index == (("c", ((1, 1),)),)  # the column dim of the [rows, columns] domain
    assert [(r.low, r.high) for r in sg.int_ranges.values()] == [(0, 1000)]
    for s in (spec, spec.with_knobs(BLOCK_C=128, ROWS=2, num_warps=1)):
        check(sg, s, seed=1)
        check(sg, s, inputs=_with_ignored_targets(sg, 2))


@pytest.mark.parametrize(
    "kwargs", [{"ignore_index": 5}, {"reduction": "none"}, {"label_smoothing": 0.1}], ids=str
)
def test_cross_entropy_variants(kwargs: dict) -> None:
    sg = _fused(29, 70, torch.float32, **kwargs)
    spec = lower(sg)
    check(sg, spec)
    check(sg, spec.with_knobs(BLOCK_C=32, num_warps=1), seed=1)


def test_one_target_for_every_row_is_gathered_as_a_block() -> None:
    # MoCo's InfoNCE: the positive logit sits at column 0 of every row, so the target is a
    # constant and the gather's index one scalar; its bounds check `row_mask & (0 >= 0)`
    # mixed a Python bool into the block mask, which the interpreter refused
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t = torch.zeros(x.shape[0], dtype=torch.long)
        return x.amax(-1, keepdim=True), x.gather(-1, t[:, None])

    sg = traced_subgraph(fn, (torch.randn(8, 65),), "reduction")
    spec = lower(sg)
    check(sg, spec)
    check(sg, spec.with_knobs(BLOCK_C=16, num_warps=1), seed=1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_gather_is_exact_selection(dtype: torch.dtype) -> None:
    """The picked element bit for bit: signed zeros, infinities, tiny values (NaN stays NaN;
    bf16 NaN payloads are not kept by the kernel's float32 widening, gather or not)."""

    def fn(x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.amax(-1, keepdim=True), x.gather(-1, t[:, None])

    x = torch.randn(6, 45, dtype=dtype)
    t = torch.tensor([0, 44, 17, 3, 30, 9])
    for r, value in enumerate([-0.0, 0.0, float("inf"), float("-inf"), float("nan"), 1e-30]):
        x[r, int(t[r])] = value
    sg = traced_subgraph(fn, (x, t), "reduction")
    spec = lower(sg)
    inputs = [t if dt == "int64" else x for _, _, dt in sg.input_meta]  # canonical order
    want = x.gather(-1, t[:, None])
    nan = want.isnan()
    outputs = sg.module()(*inputs)
    (picked,) = [i for i, o in enumerate(outputs) if ((o == want) | (o.isnan() & nan)).all()]
    for s in (spec, spec.with_knobs(BLOCK_C=16, num_warps=1)):
        got = build(s)(*inputs)[picked]
        assert got.isnan().equal(nan)
        assert got[~nan].view(torch.int8).equal(want[~nan].view(torch.int8)), got


def test_bench_shape_reads_each_row_once() -> None:
    """Logits 4096 x 32000 bf16 (the bench's cross_entropy): at the default knobs each row is
    read once (max and the sum of exponentials rescaled online), the target's logit is one load
    per row, and nothing row-sized is written."""
    from torch._inductor.decomposition import select_decomp_table

    from kernelpro_backend.fx_passes.subgraph import find_subgraphs

    def fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target)

    gm = make_fx(fn, decomposition_table=select_decomp_table(), tracing_mode="fake")(
        torch.empty(4096, 32000, dtype=torch.bfloat16), torch.zeros(4096, dtype=torch.int64)
    )
    (sg,) = [s for s in find_subgraphs(gm, "inference", "ieee") if "gather" in s.ops]
    spec = lower(sg)
    assert (4096, 1) in [shape for shape, _, _ in spec.outputs]  # the picked log-prob
    assert all(shape[-1] != 32000 for shape, _, _ in spec.outputs)
    source = render(spec).source
    assert _passes(source) == 1
    # the target once, the logits once in the column loop, the target's logit once per row
    assert source.count("tl.load(in") == 3 and "< 32000), other=0)" in source


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_cross_entropy_on_the_gpu(dtype: torch.dtype) -> None:
    """Compiled by Triton for the device (not the interpreter) at the bench's vocabulary: the
    default kernel (one block per row) and a looped one (32 blocks a row), forward and
    inference subgraphs, with a third of the targets ignored."""
    for train in (True, False):
        sg = _fused(517, 32000, dtype, train, device="cuda")
        spec = lower(sg)
        for s in (spec, spec.with_knobs(BLOCK_C=1024, ROWS=1, num_warps=4)):
            check(sg, s, inputs=_with_ignored_targets(sg, 6))
            check(sg, s, seed=7)


class _SpecProvider:
    """Every subgraph that lowers runs as its default-knob kernel (interpreted on the CPU)."""

    def __init__(self) -> None:
        self.patterns: list[str] = []

    def find(self, subgraph: Subgraph):  # type: ignore[no-untyped-def]
        try:
            kernel = build(lower(subgraph))
        except Unsupported:
            return None
        self.patterns.append(f"{subgraph.pattern}:{'gather' in subgraph.ops}")
        return kernel


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 61, dim: int = 24) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.head(torch.tanh(self.emb(tokens)))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


class LogitsCE(nn.Module):
    """The bench's shape of the problem: logits computed elsewhere, cross-entropy on them."""

    def __init__(self, n: int = 21, vocab: int = 300) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.randn(n, vocab) * 3)

    def forward(self, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp = self.logits.log_softmax(-1)
        return F.nll_loss(logp, targets), logp  # the log-probs are also returned


def _train(model: nn.Module, fn, inputs, steps: int = 2):  # type: ignore[no-untyped-def]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = fn(*inputs)
        loss = out if isinstance(out, torch.Tensor) else out[0] + 1e-3 * out[1].square().sum()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name", ["tiny_lm", "wide_lm", "logits_ce"])
def test_training_through_the_backend_matches_eager(name: str) -> None:
    torch.manual_seed(0)
    if name in ("tiny_lm", "wide_lm"):
        vocab = 61 if name == "tiny_lm" else 300  # 300: wider than any GEMM tile
        model_ref = TinyLM(vocab)
        inputs = (torch.randint(0, vocab, (3, 7)), torch.randint(0, vocab, (3, 7)))
        inputs[1][0, :2] = -100  # ignored positions
    else:
        model_ref = LogitsCE()
        inputs = (torch.randint(0, 300, (21,)),)
    model = copy.deepcopy(model_ref)
    provider = _SpecProvider()
    sessions: list[CompileSession] = []
    backend = make_backend(provider=provider, sessions=sessions)
    # The kernels' path: the LM-head rewrite (on by default) would take the whole chain.
    options = {"fallback": "eager", "rewrite_linear_cross_entropy": False}
    compiled = torch.compile(model, backend=backend, options=options)
    ref_losses, ref_grads = _train(model_ref, model_ref, inputs)
    losses, grads = _train(model, compiled, inputs)
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    replaced = sum(len(r.replaced) for s in sessions for r in s.reports)
    assert replaced == len(provider.patterns) and replaced >= 3
    fused = [p for p in provider.patterns if p.endswith(":True")]
    # the tiny LM's vocabulary fits a GEMM tile: the gather rides in the head GEMM's epilogue;
    # a wider one gets its own fused cross-entropy kernel after the head GEMM's
    assert fused == (
        ["addmm+epilogue+rowreduce:True"] if name == "tiny_lm" else ["cross_entropy:True"]
    )
    if name == "wide_lm":
        assert any(p.startswith("addmm") for p in provider.patterns), provider.patterns
