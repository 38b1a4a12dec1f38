"""A causal mask read from a buffer (nanoGPT's `bias` buffer, a `tril` bool buffer) becomes SDPA's
`is_causal=True` — only when the buffer holds a causal mask when the graph is compiled, and
only while it still does: the backend checks the buffer's version on each call, re-checks its
values when it moved, and runs a graph compiled without relying on them once they change. A
buffer the graph itself writes in place is never relied on (the check runs before the write)."""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes.attention_rewrite import rewrite_attention
from kernelpro_backend.fx_passes.causal_mask import lower_triangular
from kernelpro_backend.rewrite import guarded
from kernelpro_backend.rewrite.providers import NullProvider

B, H, T, D, N = 2, 2, 8, 16, 12  # N: the buffer's size (block size), T <= N


class Masked(torch.nn.Module):
    def __init__(self, spelling: str, mask: torch.Tensor | None = None) -> None:
        super().__init__()
        self.spelling = spelling
        if spelling == "nanogpt_float":  # as nanoGPT registers it: float ones, [1, 1, N, N]
            self.register_buffer("bias", torch.tril(torch.ones(N, N)).view(1, 1, N, N))
        else:
            self.register_buffer("mask", torch.tril(torch.ones(N, N, dtype=torch.bool)))
        if mask is not None:
            self.mask = mask

    def forward(self, q, k, v):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        if self.spelling == "nanogpt_float":
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        elif self.spelling == "bool_sliced":
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        elif self.spelling == "offset_window":  # not from the top left: not causal as SDPA's
            att = att.masked_fill(~self.mask[1 : t + 1, :t], float("-inf"))
        else:
            raise AssertionError(self.spelling)
        return F.softmax(att, dim=-1) @ v


def _inputs(t=T, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, t, D, generator=g, requires_grad=True) for _ in range(3)]


def _rewritten(module) -> tuple[list[dict], list[str]]:
    found, relied_names = [], []

    def backend(gm, example_inputs):
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        values = dict(zip(placeholders, example_inputs, strict=True))
        relied: list = []
        rewrite_attention(gm, values, relied)
        found.extend(
            dict(n.kwargs) for n in gm.graph.nodes if n.target is F.scaled_dot_product_attention
        )
        relied_names.extend(str(n.target) for n in relied)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(module, backend=backend)(*_inputs())
    return found, relied_names


@pytest.mark.parametrize("spelling", ["nanogpt_float", "bool_sliced"])
def test_a_buffer_holding_a_causal_mask_becomes_is_causal_and_is_named_for_the_guard(spelling):
    (kwargs,), relied = _rewritten(Masked(spelling))
    assert kwargs.get("is_causal") is True and "attn_mask" not in kwargs
    assert len(relied) == 1 and ("bias" if spelling == "nanogpt_float" else "mask") in relied[0]


@pytest.mark.parametrize(
    ("spelling", "mask"),
    [
        ("bool_sliced", torch.tril(torch.ones(N, N, dtype=torch.bool), diagonal=-1)),
        ("bool_sliced", torch.ones(N, N, dtype=torch.bool)),
        ("offset_window", None),
    ],
    ids=["strictly_lower", "all_true", "offset_window"],
)
def test_any_other_buffer_mask_stays_an_attn_mask(spelling, mask):
    (kwargs,), relied = _rewritten(Masked(spelling, mask))
    assert "attn_mask" in kwargs and not kwargs.get("is_causal") and relied == []


def test_lower_triangular_reads_values_not_shapes():
    tril = torch.tril(torch.ones(5, 5))
    assert lower_triangular(tril) and lower_triangular(tril.bool().view(1, 1, 5, 5))
    assert not lower_triangular(torch.ones(5, 5)) and not lower_triangular(torch.ones(4, 5))
    assert not lower_triangular(torch.tril(torch.ones(5, 5), diagonal=-1))


def _compiled(module):
    torch._dynamo.reset()
    return torch.compile(
        module, backend=make_backend(provider=NullProvider()), options={"fallback": "eager"}
    )


def _check(compiled, module, seed):
    inputs, ref_inputs = _inputs(seed=seed), _inputs(seed=seed)
    out, ref = compiled(*inputs), module(*ref_inputs)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    for a, b in zip(inputs, ref_inputs, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-5)


def test_training_through_it_matches_eager_and_a_changed_buffer_is_honoured(caplog):
    module = Masked("bool_sliced")
    compiled = _compiled(module)
    _check(compiled, module, 0)
    with torch.no_grad():  # the same values written again: re-checked, still causal
        module.mask.copy_(torch.tril(torch.ones(N, N, dtype=torch.bool)))
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        _check(compiled, module, 1)
    assert "no longer hold" not in caplog.text
    with torch.no_grad():  # now a different mask: the graph that does not rely on it runs
        module.mask.fill_(True)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        _check(compiled, module, 2)
        _check(compiled, module, 3)
    assert caplog.text.count("no longer hold the values relied on") == 1
    assert "causal mask (mask) no longer hold" in caplog.text  # named as the module names it


def test_a_buffer_rewritten_every_call_stops_being_relied_on(caplog, monkeypatch):
    monkeypatch.setattr(guarded, "RECHECKS", 2)
    module = Masked("nanogpt_float")
    compiled = _compiled(module)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        for seed in range(5):
            with torch.no_grad():
                module.bias.mul_(1.0)  # same values, a new version each time
            _check(compiled, module, seed)
    assert caplog.text.count("changed more than 2 times") == 1


def test_two_tensors_in_turn_are_checked_once_each_and_a_new_one_at_an_old_address_is_not_trusted():
    checked = []

    def still_valid(t):
        checked.append(t)
        return True

    a, b = torch.tril(torch.ones(4, 4)), torch.tril(torch.ones(4, 4))
    calls = []
    g = guarded.ValueGuarded(lambda *x: calls.append(x) or len(calls), [a], [0], still_valid,
                             lambda: pytest.fail("no fallback expected"), "the mask")  # fmt: skip
    for _ in range(3):  # a model and its EMA copy sharing one compiled graph
        g(a)
        g(b)
    assert checked == [b] and len(calls) == 6
    with torch.no_grad():
        a.mul_(1.0)  # a new version: checked again
    g(a)
    assert checked == [b, a]


def test_two_instances_sharing_the_compiled_code_run_without_falling_back(caplog):
    first, second = Masked("bool_sliced"), Masked("bool_sliced")
    backend = make_backend(provider=NullProvider())
    torch._dynamo.reset()
    runs = [
        torch.compile(m, backend=backend, options={"fallback": "eager"}) for m in (first, second)
    ]
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        for seed in range(4):
            for compiled, module in zip(runs, (first, second), strict=True):
                _check(compiled, module, seed)
    assert "since the graph was compiled" not in caplog.text


def test_an_input_is_named_as_the_model_names_it():
    from types import SimpleNamespace

    import torch.fx as fx

    from kernelpro_backend.fx_passes.torch_level import input_name

    node = fx.Graph().placeholder("L_self_modules_a_buffers_m_")
    assert input_name(node) == "L_self_modules_a_buffers_m_"  # no source recorded
    cases = [
        ("L['self']._modules['a']._buffers['m']", "a.m"),
        (lambda: "L['self']._buffers['m']", "m"),  # a method in older torch, a property in newer
    ]
    for source, name in cases:
        node.meta["grapharg"] = SimpleNamespace(source=SimpleNamespace(name=source))
        assert input_name(node) == name
    node.meta["grapharg"] = SimpleNamespace(source=SimpleNamespace(name="G['mask'][0]"))
    assert input_name(node) == "G['mask'][0]"  # not an attribute path of the module: as is


class WritesItsBuffer(torch.nn.Module):
    """A causal buffer the forward writes in place (directly or through a view) before the
    hand-written attention reads it: what the attention sees is the written value, not the
    one the buffer held when the graph was compiled."""

    def __init__(self, write: str) -> None:
        super().__init__()
        self.write = write
        self.register_buffer("bias", torch.tril(torch.ones(N, N)).view(1, 1, N, N))

    def forward(self, q, k, v):
        t = q.size(-2)
        if self.write == "setitem":
            self.bias[..., 0, 1] = 1.0
        elif self.write == "masked_fill_view":
            view = self.bias[:, :, :2, :2]
            view.masked_fill_(view == 0, 1.0)
        elif self.write == "fill_view_of_view":
            self.bias[0][0][0, 1:3].fill_(1.0)
        else:
            raise AssertionError(self.write)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ v


@pytest.mark.parametrize("write", ["setitem", "masked_fill_view", "fill_view_of_view"])
def test_a_buffer_the_graph_writes_in_place_is_not_relied_on_and_matches_eager(write):
    module, reference = WritesItsBuffer(write), WritesItsBuffer(write)
    (kwargs,), relied = _rewritten(WritesItsBuffer(write))
    assert not kwargs.get("is_causal") and "attn_mask" in kwargs and relied == []
    compiled = _compiled(module)
    for seed in range(2):  # the first call too: the write happens inside the graph
        _check(compiled, reference, seed)
    torch.testing.assert_close(module.bias, reference.bias)
