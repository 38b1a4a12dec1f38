"""The padded GEMM ("gemm_padded"): a GEMM whose N, K or M (or an operand's pitch) breaks 16-byte
alignment gets the library's aligned GEMM on zero-padded operands as an alternative of its seed;
it computes the subgraph (the LM head's forward x @ W^T with N odd, its dgrad dY @ W with K
odd, its wgrad dY^T @ X with M odd and A column-major, batched, with a bias and a cast) with
the subgraph's exact output strides, is offered only for unaligned GEMMs, and reaches the
search's candidates and its log."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from harness import check
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.codegen import IllegalSpec, alternatives, render
from kernelpro_backend.codegen.templates.padded import padded_plan
from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel

BF16 = torch.bfloat16


def _seed(fn, *inputs):
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    (sg,) = [s for s in find_subgraphs(gm, "inference") if s.kind == "gemm"]
    return sg, lower(sg)


def _padded(seed):
    return [a for a in alternatives(seed) if a.template == "gemm_padded"]


_CASES = {  # name: (fn, shapes, what is padded)
    # an LM head's forward, vocabulary 1001 (50257 scaled down): N padded, W copied
    "head": (lambda x, w: (F.linear(x, w),), [(2, 4, 16), (1001, 16)], (8, 1008, 16)),
    # 8x13 @ 13x1001: K and N odd
    "mm": (lambda a, b: (torch.mm(a, b),), [(8, 13), (13, 1001)], (8, 1008, 16)),
    # the head's dgrad dY @ W (K = vocabulary), into float32 as autocast's backward casts it
    "dgrad": (lambda g, w: (torch.mm(g, w).float(),), [(8, 1001), (1001, 16)], (8, 16, 1008)),
    # its wgrad dY^T @ X: M = vocabulary, A column-major
    "wgrad": (lambda g, x: (torch.mm(g.t(), x).float(),), [(8, 1001), (8, 16)], (1008, 16, 8)),
    # batched, every dim odd, M odd on a row-major A (left as it is)
    "bmm": (lambda a, b: (torch.bmm(a, b),), [(3, 5, 13), (3, 13, 7)], (5, 8, 16)),
    # a bias (an epilogue load) and an activation, N odd
    "bias": (
        lambda x, w, b: (torch.relu(F.linear(x, w, b)) * 0.5,),
        [(6, 16), (31, 16), (31,)],
        (6, 32, 16),
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_an_unaligned_gemm_runs_as_the_aligned_gemm_on_padded_operands(name):
    fn, shapes, padded = _CASES[name]
    sg, seed = _seed(fn, *(torch.randn(*s, dtype=BF16) for s in shapes))
    (alt,) = _padded(seed)
    plan = padded_plan(alt)
    assert (plan.mp, plan.np, plan.kp) == padded
    source = render(alt).source
    assert "_pad(" in source and "@triton.jit" not in source
    for seed_no in range(3):
        check(sg, alt, seed=seed_no)


def test_float32_under_tf32_is_padded_and_exact_where_the_product_is_ieee():
    # On the CPU the product stays IEEE: the zero padding must change no bit of it.
    a, b = torch.randn(8, 13), torch.randn(13, 1001)
    sg, seed = _seed(lambda a, b: (torch.mm(a, b),), a, b)
    assert not _padded(seed)  # IEEE float32: FMA units, no aligned library kernel to reach
    (alt,) = _padded(dataclasses.replace(seed, precision="tf32"))
    got = build_kernel(alt)(a, b)[0]
    assert got.stride() == (1001, 1)
    assert torch.equal(got, torch.mm(a, b))


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (lambda x, w: (F.linear(x, w),), [(8, 16), (1008, 16)]),  # the padded vocabulary
        (lambda g, w: (torch.mm(g, w),), [(8, 1008), (1008, 16)]),
        (lambda g, x: (torch.mm(g.t(), x),), [(8, 1008), (8, 16)]),
        (lambda a, b: (torch.mm(a, b),), [(7, 16), (16, 24)]),  # M odd, A row-major: aligned
    ],
)
def test_an_aligned_gemm_gets_no_padded_candidate(fn, shapes):
    _, seed = _seed(fn, *(torch.randn(*s, dtype=BF16) for s in shapes))
    assert not _padded(seed)
    with pytest.raises(IllegalSpec, match="aligned already"):
        dataclasses.replace(seed, template="gemm_padded", knobs=())


def test_a_row_reducing_epilogue_gets_no_padded_candidate():
    x, w = torch.randn(8, 16, dtype=BF16), torch.randn(31, 16, dtype=BF16)
    _, seed = _seed(lambda x, w: (F.linear(x, w).amax(-1),), x, w)
    assert not _padded(seed)


class _FastPadded:
    """A fake measurer: the padded candidate takes 1 ms, every other 3 ms, baselines 3.5."""

    def __init__(self):
        self.measured = []

    def baselines(self, subgraph):
        from kernelpro_backend.runtime.result import EvalResult, EvalStatus

        return {n: EvalResult(EvalStatus.OK, median_ms=3.5, spread_ms=0.01, times_ms=(3.5,))
                for n in ("eager", "inductor")}  # fmt: skip

    def measure(self, subgraph, candidates):
        from kernelpro_backend.runtime.result import EvalResult, EvalStatus

        self.measured += [c.template for c in candidates]
        out = []
        for c in candidates:
            ms = 1.0 if c.template == "gemm_padded" else 3.0
            out.append(EvalResult(EvalStatus.OK, median_ms=ms, spread_ms=0.01, times_ms=(ms,)))
        return out


def test_the_search_measures_the_padded_candidate_and_logs_its_win(tmp_path):
    from kernelpro_backend.explain import templates_of
    from kernelpro_backend.search import Budget, codegen_space, optimize

    x, w = torch.randn(2, 4, 16, dtype=BF16), torch.randn(1001, 16, dtype=BF16)
    sg, _ = _seed(lambda x, w: (F.linear(x, w),), x, w)
    assert "gemm_padded" in [c.template for c in codegen_space().initial(sg)]
    assert "gemm_padded" in templates_of(sg)  # `kernelpro explain` lists it as a candidate
    measurer, log = _FastPadded(), tmp_path / "search.jsonl"
    outcome = optimize(
        sg,
        space=codegen_space(),
        measurer=measurer,
        budget=Budget(max_trials=6, max_seconds=1e9, plateau_trials=None, behind_gap=None),
        log_path=str(log),
        progress=False,
    )
    assert "gemm_padded" in measurer.measured
    assert not outcome.uses_fallback and outcome.winner.template == "gemm_padded"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    (won,) = [e for e in events if e.get("id") == events[-1]["winner"]]
    assert won["candidate"]["note"] == "gemm_padded: pads N 1001->1008; copies B"


class _PaddedProvider:
    """Every GEMM subgraph that gets a padded candidate runs it (as a search it won would)."""

    def __init__(self):
        self.replaced, self.calls = [], 0

    def find(self, subgraph):
        if subgraph.kind != "gemm":
            return None
        found = _padded(lower(subgraph))
        if not found:
            return None
        self.replaced.append((subgraph.graph, found[0]))
        kernel = build_kernel(found[0])

        def run(*inputs):
            self.calls += 1
            return kernel(*inputs)

        run.name = kernel.name  # a plain callable: it runs behind kernelpro::launch
        return run


def test_an_lm_head_trains_like_eager_with_its_three_gemms_padded():
    # forward x @ W^T (N odd), dgrad dY @ W (K odd), wgrad dY^T @ X (M odd), under autocast
    from kernelpro_backend import make_backend

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 1001, bias=False)

        def forward(self, x):
            with torch.autocast("cpu", dtype=BF16):
                return self.proj(x)

    torch.manual_seed(0)
    ref, model = Head(), Head()
    model.load_state_dict(ref.state_dict())
    x, g = torch.randn(2, 8, 16, dtype=BF16), torch.randn(2, 8, 1001, dtype=BF16)
    provider = _PaddedProvider()
    torch._dynamo.reset()
    fn = torch.compile(model, backend=make_backend(provider), options={"fallback": "eager"})
    outs = []
    for m, f in ((ref, ref), (model, fn)):
        xi = x.clone().requires_grad_()
        y = f(xi)
        y.backward(g)
        outs.append((y, xi.grad, m.proj.weight.grad))
    notes = sorted((graph, padded_plan(s).note()) for graph, s in provider.replaced)
    assert notes == [
        ("backward", "pads K 1001->1008; copies A+B"),
        ("backward", "pads M 1001->1008; copies A"),
        ("forward", "pads N 1001->1008; copies B"),
    ]
    assert provider.calls == 3  # each ran once, in place of its subgraph
    for got, want in zip(outs[1], outs[0], strict=True):
        assert got.dtype == want.dtype and got.stride() == want.stride()
        torch.testing.assert_close(got.float(), want.float(), rtol=1.6e-2, atol=1.6e-2)
