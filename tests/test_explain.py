"""`explain_model` tells what the torch-level rewrites did with each chain they looked at (a
refused one with its reason) and the graph breaks dynamo made in the model's code, with their
cause and where — from the compile explain runs anyway, not a second trace — and which inputs
a rewrite relied on, with how a compile checks them."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend.explain import (
    GraphBreak,
    ReliedInput,
    explain_model,
    format_breaks,
    format_notes,
    format_relied,
)
from kernelpro_backend.fx_passes import linear_ce_rewrite


@pytest.fixture(autouse=True)
def _fuse_any_width(monkeypatch):
    """The kept-logits loss at these tests' small vocabularies (the rewrite's width gate,
    FUSED_MIN_COLUMNS, is measured at real ones)."""
    monkeypatch.setattr(linear_ce_rewrite, "FUSED_MIN_COLUMNS", 0)


class Breaks(torch.nn.Module):
    """An LM head whose loss has class weights, then a call dynamo cannot trace."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(8, 20)

    def forward(self, h, t):
        loss = F.cross_entropy(self.head(h), t, weight=torch.ones(20))
        print("loss computed")  # a graph break, as a logging call in a model's code is
        logging.getLogger("explain-test").warning("careful")  # one that ends no graph
        return loss * 2


def test_explain_reports_refused_chains_and_graph_breaks_with_their_cause(capsys):
    notes: list = []
    breaks: list[GraphBreak] = []
    h, t = torch.randn(6, 8), torch.randint(0, 20, (6,))
    explain_model(Breaks(), h, t, notes=notes, breaks=breaks)
    (loss,) = notes
    assert loss.made is None and loss.reason == "class weights"
    assert loss.where.startswith("test_explain.py:")
    printed = [b for b in breaks if "print" in b.cause]
    assert (
        printed
        and printed[0].where.startswith("test_explain.py:")
        and "in forward" in printed[0].where
    )
    assert any("logging" in b.cause.lower() for b in breaks), breaks
    text = format_notes(notes) + "\n" + format_breaks(breaks)
    assert "left as written: class weights" in text and "print" in text


class MaskAcrossABreak(torch.nn.Module):
    """An all-True mask built from positions, a graph break (BART's LayerDrop draw), then SDPA
    reading the mask as an input of the second graph."""

    def forward(self, q, k, v):
        idx = torch.arange(q.shape[-2])[None, None, :, None]
        mask = (idx >= 0).expand(q.shape[0], 1, q.shape[-2], k.shape[-2])
        torch._dynamo.graph_break()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def mask_across_a_break():
    """(model, inputs) for `kernelpro explain`."""
    g = torch.Generator().manual_seed(0)
    return MaskAcrossABreak(), tuple(torch.randn(2, 2, 8, 16, generator=g) for _ in range(3))


def test_a_mask_an_earlier_graph_proved_constant_is_listed_as_relied_on_with_its_check():
    relied: list[ReliedInput] = []
    model, inputs = mask_across_a_break()
    torch._dynamo.reset()
    _, made = explain_model(model, *inputs, relied_on=relied, train=False)
    assert made["attention_mask"] == 1
    (mask,) = relied
    assert mask.name == "L['mask']", mask
    assert (
        mask.holds
        == "a mask an earlier graph proved constant: it attends everywhere (b8[2, 1, 8, 8])"
    )
    assert "registered output, unwritten since" in mask.check
    text = format_relied([mask, mask])  # one line per input, however many graphs relied on it
    assert text.count("L['mask']") == 1 and "checked: on each call, on the host" in text
