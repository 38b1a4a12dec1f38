"""A linear whose rows break 16-byte alignment (a vocabulary of 50257) is padded before
AOTAutograd so its backward GEMMs read an aligned dY: the rewrite fires on unaligned linears
and not on aligned ones (alignment by the GEMM's dtype, autocast's under autocast), keeps
whatever the graph and its caller do with the logits working, says why where it does not pad,
and models train through it as eagerly. The device gate is CUDA; these tests pass a rule for
the CPU, and sizes gates of zero, through a backend that pads and then hands the graph to
kernelpro's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

from kernelpro_backend import make_backend
from kernelpro_backend.explain import explain_model
from kernelpro_backend.fx_passes.pad_gemm import PadRule, pad_unaligned_gemms
from kernelpro_backend.fx_passes.torch_level import ChainNote
from kernelpro_backend.fx_passes.torch_rewrites import torch_rewrites
from kernelpro_backend.options import Options
from kernelpro_backend.rewrite.providers import NullProvider

K, N = 32, 1001  # N: not a multiple of 4 (fp32) nor 8 (bf16)
CPU = PadRule(devices=("cpu",), min_rows=0, min_flops=0)


class Head(torch.nn.Module):
    """hidden -> relu -> an LM head; `form` says what the graph does with the logits."""

    def __init__(self, n: int = N, k: int = K, bias: bool = True, form: str = "returned") -> None:
        super().__init__()
        self.pre, self.head, self.form = torch.nn.Linear(k, k), torch.nn.Linear(k, n, bias), form

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.head(torch.relu(self.pre(x)))
        if self.form == "returned":
            return (logits,)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))
        if self.form == "loss":
            return (loss,)
        if self.form == "flat_view":  # a view that merges the vocabulary with the rows
            return loss, logits.view(-1).sum()
        return loss, logits  # "loss_and_logits", as Hugging Face's models return them


def _inputs(seed: int = 0, rows: tuple[int, ...] = (2, 16), n: int = N):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*rows, K, generator=g).requires_grad_()
    return x, torch.randint(0, n, rows, generator=g)


def _padding_backend(rule: PadRule, made: list[int], notes: list[ChainNote] | None = None):
    """Pads by `rule`, then kernelpro's backend compiles the graph (its own pass, with the
    CUDA rule, finds nothing more to do on the CPU)."""
    inner = make_backend(provider=NullProvider())

    def backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
        made.append(pad_unaligned_gemms(gm, notes, rule))
        return inner(gm, example_inputs, options={"fallback": kwargs.get("fallback", "eager")})

    return backend


def _captured(model: torch.nn.Module, *inputs, rule: PadRule = CPU, autocast: bool = False):
    """(linears padded, notes) when dynamo's graph of `model(*inputs)` goes through the pass."""
    notes: list[ChainNote] = []
    made: list[int] = []

    def backend(gm, example_inputs):
        made.append(pad_unaligned_gemms(gm, notes, rule))
        return gm.forward

    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        torch.compile(model, backend=backend)(*inputs)
    return sum(made), notes


def _head_notes(notes: list[ChainNote]) -> list[ChainNote]:
    return [n for n in notes if n.node != "linear"]  # the head's, not `pre`'s (K=32: aligned)


def test_an_unaligned_head_is_padded_and_an_aligned_one_is_not():
    made, notes = _captured(Head(), *_inputs())
    assert made == 1
    assert [n.made for n in notes] == [
        "padded to 16-byte rows in torch.float32 (the backward's dY): N=1001 -> 1004"
    ]
    made, notes = _captured(Head(n=1004), *_inputs(n=1004))
    assert made == 0 and notes == []


def test_the_alignment_is_that_of_the_dtype_the_gemm_runs_in():
    """1004 columns: 16-byte rows in float32 (4 elements), not in bf16 (8): padded under
    autocast only."""
    assert _captured(Head(n=1004), *_inputs(n=1004))[0] == 0
    made, notes = _captured(Head(n=1004), *_inputs(n=1004), autocast=True)
    assert made == 1 and "in torch.bfloat16 (the backward's dY): N=1004 -> 1008" in notes[0].made


def test_it_pads_only_where_it_pays_and_says_why_not():
    x, labels = _inputs()
    cuda = PadRule(min_rows=0, min_flops=0)  # the default devices
    assert _head_notes(_captured(Head(), x, labels, rule=cuda)[1])[0].reason.endswith(
        "but it runs on cpu: only cuda pads"
    )
    with torch.no_grad():
        (no_grad,) = _head_notes(_captured(Head(), x, labels)[1])
    assert "it has no backward" in no_grad.reason
    small = PadRule(devices=("cpu",), min_rows=64, min_flops=0)
    assert "is below 64 rows" in _head_notes(_captured(Head(), x, labels, rule=small)[1])[0].reason
    # dY written in the graph with static shapes: Inductor pads its row stride, not the GEMM's
    # dimension, and cuBLAS still picks a slower kernel for it, so this pads there too.
    assert _captured(Head(form="loss"), x, labels)[0] == 1
    assert _captured(Head(form="returned"), x, labels)[0] == 1  # dY from outside


def test_with_dynamic_rows_the_loss_in_the_graph_hands_the_head_a_padded_dy():
    """A size symbolic: the rows' hint for the size gates, the views replayed at it."""
    pads = CPU
    notes: list[ChainNote] = []
    made: list[int] = []

    def backend(gm, example_inputs):
        made.append(pad_unaligned_gemms(gm, notes, pads))
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(Head(form="loss_and_logits"), backend=backend, dynamic=True)
    loss, logits = compiled(*_inputs(rows=(2, 16)))
    assert sum(made) == 1, notes
    assert logits.is_contiguous()


def test_only_the_backward_reads_padded_rows_and_the_forward_runs_as_written():
    """AOTAutograd's graphs of a padded head: the forward's GEMM writes the logits at N columns
    (no pad, no slice, no copy of them), and both backward GEMMs read dY at N + pad."""
    graphs: dict[str, torch.fx.GraphModule] = {}

    def keep(name: str):
        def compiler(gm: torch.fx.GraphModule, example_inputs):
            graphs[name] = gm
            return make_boxed_func(gm.forward)

        return compiler

    def backend(gm, example_inputs):
        assert pad_unaligned_gemms(gm, None, CPU) == 1
        return aot_module_simplified(gm, example_inputs, keep("fw"), keep("bw"))

    torch._dynamo.reset()
    (logits,) = torch.compile(Head(), backend=backend)(*_inputs())
    logits.sum().backward()

    def mm_shapes(gm: torch.fx.GraphModule) -> list[list[tuple[int, ...]]]:
        found = []
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in (
                torch.ops.aten.mm.default,
                torch.ops.aten.addmm.default,
            ):
                found.append(
                    [tuple(a.meta["val"].shape) for a in node.args if isinstance(a, torch.fx.Node)]
                )
        return found

    assert all(N + 3 not in shape for args in mm_shapes(graphs["fw"]) for shape in args)
    head_mms = [args for args in mm_shapes(graphs["bw"]) if any(N + 3 in s for s in args)]
    assert len(head_mms) == 2, mm_shapes(graphs["bw"])  # dX and dW, both on the padded dY
    assert all(N not in s for args in head_mms for s in args)


def test_in_features_are_padded_only_when_x_is_produced_in_the_graph():
    class TwoLinears(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(30, 30), torch.nn.Linear(30, 64)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    made, notes = _captured(TwoLinears(), torch.randn(8, 30, requires_grad=True))
    assert made == 2
    first, second = notes
    assert "N=30 -> 32; K=30 left: x is a graph input" in first.made
    assert second.made == "padded to 16-byte rows in torch.float32 (the GEMMs): K=30 -> 32"


@pytest.mark.parametrize(
    ("form", "bias", "rows", "fallback"),
    [
        ("returned", True, (2, 16), "eager"),
        ("loss_and_logits", False, (32,), "eager"),
        ("loss", True, (2, 16), "eager"),
        ("loss_and_logits", True, (2, 16), "inductor"),
        ("flat_view", True, (2, 16), "eager"),
    ],
)
def test_training_through_the_backend_matches_eager(form, bias, rows, fallback):
    """Forward and the gradients of x, W and b against eager. Tolerance: float32's (the
    padded sums add exact zeros, but BLAS picks its blocking by shape: a dW of another shape
    differed from eager in its last bits on the CPU)."""
    torch.manual_seed(0)
    model, ref = Head(bias=bias, form=form), Head(bias=bias, form=form)
    ref.load_state_dict(model.state_dict())
    made: list[int] = []
    torch._dynamo.reset()
    backend = _padding_backend(CPU, made)
    compiled = torch.compile(model, backend=lambda gm, ex: backend(gm, ex, fallback=fallback))
    (x, labels), (x_ref, _) = _inputs(1, rows), _inputs(1, rows)
    out, want = compiled(x, labels), ref(x_ref, labels)
    sum(o.float().sum() * (i + 1) for i, o in enumerate(out)).backward()
    sum(o.float().sum() * (i + 1) for i, o in enumerate(want)).backward()
    assert sum(made) >= 1  # the head at least (`pre`'s 32 columns are aligned)
    for got, expected in zip(out, want, strict=True):
        assert got.shape == expected.shape and got.stride() == expected.stride()
        torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x.grad, x_ref.grad)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    if form == "returned":
        out[0].view(-1)  # the caller's view of the logits works as on eager's


def test_it_is_an_option_counted_among_the_rewrites_and_explain_shows_its_notes():
    assert Options().rewrite_pad_gemm is True
    gm = torch.fx.symbolic_trace(torch.nn.Linear(K, N))
    assert torch_rewrites(gm, Options())["pad_gemm"] == 0
    assert "pad_gemm" not in torch_rewrites(gm, Options(rewrite_pad_gemm=False))
    notes: list[ChainNote] = []
    _, made = explain_model(Head(), *_inputs(), notes=notes)
    assert made["pad_gemm"] == 0  # on the CPU
    (head,) = [n for n in notes if n.rewrite == "pad_gemm"]
    assert head.reason and head.reason.endswith("but it runs on cpu: only cuda pads")


def test_a_hugging_face_causal_lm_with_an_odd_vocabulary_trains_through_it_as_eagerly():
    """GPT-2 (2 layers, hidden 64, vocabulary 1001, tied head) called with `labels=` under bf16
    autocast, as users train it: its head is padded (a logging call breaks the graph between
    the head and the loss: the logits are returned and dY comes from the loss's graph), and
    three SGD steps follow eager's within bf16's tolerance (test_hf_models': the loss within 1
    eps, the logits and each gradient within 2 eps in norm)."""
    transformers = pytest.importorskip("transformers")
    eps, vocab = torch.finfo(torch.bfloat16).eps, 1001

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        config = transformers.GPT2Config(
            vocab_size=vocab, n_positions=64, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0,
        )  # fmt: skip
        return transformers.GPT2LMHeadModel(config)

    model, ref = build(), build()
    made: list[int] = []
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=_padding_backend(CPU, made))
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ref)]
    for step in range(3):
        ids = torch.randint(0, vocab, (2, 32), generator=torch.Generator().manual_seed(step))
        outs = []
        for fn, opt in ((compiled, opts[0]), (ref, opts[1])):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = fn(ids, labels=ids)
            out.loss.backward()
            outs.append(out)
        got, want = outs
        assert abs(got.loss.item() - want.loss.item()) <= eps * abs(want.loss.item()), step
        assert _relative(got.logits, want.logits) <= 2 * eps, step
        assert got.logits.stride() == want.logits.stride()
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert _relative(p.grad, q.grad) <= 2 * eps, (step, name)
        for opt in opts:
            opt.step()
    assert sum(made) >= 1


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def test_inductor_writes_the_loss_backward_into_its_slice_of_the_padded_dy():
    """With the loss in the graph, dY's producer is the loss's backward (a reduction's
    consumer). The pad is a cat with zeros, which Inductor lowers by writing that producer
    straight into a slice of the padded buffer (an alias in its code), where F.pad made a
    separate padded copy (on the GPU, a pointwise kernel recomputing the loss's backward).
    Inductor lowers every cat so on the CPU; on CUDA, a cat with an input fed by a reduction
    (torch/_inductor/lowering.py `cat`, `fusable_reduction`). The GPU's time: not yet measured."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    def backend(gm, example_inputs):
        assert pad_unaligned_gemms(gm, None, CPU) == 1
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(Head(form="loss"), backend=backend)
    x, labels = _inputs()

    def step() -> None:
        compiled(x, labels)[0].backward()

    _, code = run_and_get_code(step)
    # dY [2, 16, N] as an alias of the padded [2, 16, N + 3] buffer its producer writes into
    slices = [
        line for src in code for line in src.splitlines()
        if "# alias" in line and f", {N}), (" in line and f", {N + 3}, 1), 0)" in line
    ]  # fmt: skip
    assert slices, "\n".join(code)[-4000:]
