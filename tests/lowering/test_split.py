"""A group that needs a value at two index maps (or a row sum per column) is cut where its
parts lower (fx_passes/split.py, lowering/split.py), and an iota read through two views is
computed at each view's map. CLIP's symmetric cross-entropy (architectures/clip_loss.py) sums its logits'
gradient with the transpose of its transposed logits' gradient in one backward group: that
group went whole to the fallback."""

from __future__ import annotations

import pathlib

import pytest
import torch
from harness import check, collect, refusal, traced_subgraph

import kernelpro_backend.rewrite.graph as rewrite
from kernelpro_backend.bench.problems import load_problem_module
from kernelpro_backend.codegen.errors import MapConflict
from kernelpro_backend.fx_passes.split import split_at
from kernelpro_backend.lowering.split import split_refused

CLIP = pathlib.Path(__file__).parent / "architectures" / "clip_loss.py"


def _clip_subgraphs(split: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    if not split:
        monkeypatch.setattr(rewrite, "split_refused", lambda sgs, *_: list(sgs))
    module = load_problem_module(CLIP)
    torch.manual_seed(0)
    model = module.Model()
    inputs = [x.requires_grad_() for x in module.get_inputs()]
    return [sg for sg in collect(model, inputs, train=True) if sg.graph == "backward"]


def test_clips_backward_group_is_cut_in_two_parts_that_lower_and_match(monkeypatch):
    whole = _clip_subgraphs(False, monkeypatch)
    monkeypatch.undo()
    refused = [sg for sg in whole if isinstance(refusal(sg), MapConflict)]
    assert len(refused) == 1  # the two gradients' group, read row by row and column by column
    cut = _clip_subgraphs(True, monkeypatch)
    assert len(cut) == len(whole) + 1
    assert not any(isinstance(refusal(sg), MapConflict) for sg in cut)
    (group,) = refused
    parts = split_refused([group])
    assert len(parts) == 2
    assert sorted(n.name for p in parts for n in p.nodes) == sorted(n.name for n in group.nodes)
    for seed, part in enumerate(parts):
        check(part, seed=seed)


def test_the_first_part_holds_what_the_cut_node_depends_on_and_nothing_flows_back(monkeypatch):
    whole = _clip_subgraphs(False, monkeypatch)
    (group,) = [sg for sg in whole if isinstance(refusal(sg), MapConflict)]
    error = refusal(group)
    assert isinstance(error, MapConflict) and error.cut in group.nodes
    first, rest = split_at(group, error.cut)
    members = set(group.nodes)
    assert set(first.nodes) | set(rest.nodes) == members
    assert not set(first.nodes) & set(rest.nodes)
    for n in first.nodes:  # closed under the group's producers
        assert all(a in first.nodes for a in n.all_input_nodes if a in members)
    # the rest reads the first part's values as inputs; the first reads nothing of the rest
    assert not any(a in rest.nodes for n in first.nodes for a in n.all_input_nodes)
    assert any(i in first.nodes for i in rest.inputs)


def test_a_subgraph_that_lowers_is_not_cut_and_a_refusal_of_another_kind_stays_whole():
    sg = traced_subgraph(lambda x: (torch.softmax(x, -1),), [torch.randn(8, 32)], "reduction")
    assert split_refused([sg]) == [sg]
    # a second-level reduction (the mean of a row sum) is refused, not for two maps
    other = traced_subgraph(lambda x: (x.sum(-1).mean(),), [torch.randn(8, 32)], "reduction")
    assert not isinstance(refusal(other), MapConflict)
    assert split_refused([other]) == [other]


def test_an_iota_read_through_two_views_is_computed_at_each_views_map():
    # an identity mask from one arange seen as a column and as a row (CLIP's labels against
    # the logits' columns): the arange has two index maps, each computed where it is read
    def fn(x):
        i = torch.arange(x.shape[0])
        eye = i.unsqueeze(1) == i.unsqueeze(0)
        return (torch.where(eye, x, 0.0).sum(-1), x * eye)

    sg = traced_subgraph(fn, [torch.randn(16, 16)], "reduction")
    assert sum(n.name.startswith(("arange", "iota")) for n in sg.nodes) == 1
    check(sg)


@pytest.mark.parametrize("both", [True, False], ids=["rows-and-columns", "columns"])
def test_a_row_sum_read_per_column_is_cut_off_into_its_own_kernel(both):
    # a GCN's symmetric normalisation D^-1/2 A D^-1/2: the row sums of A scale its rows and
    # its columns (a value at two maps); scaled by columns alone, the reduction's result is
    # read per column. A row kernel cannot read another row's sum: the sums compute apart
    def fn(a):
        d = a.sum(1).rsqrt()
        return ((d[:, None] if both else 1.0) * a * d[None, :],)

    sg = traced_subgraph(fn, [torch.rand(24, 24) + 0.5], "reduction")
    assert isinstance(refusal(sg), MapConflict)
    parts = split_refused([sg])
    assert len(parts) == 2
    assert sorted(n.name for p in parts for n in p.nodes) == sorted(n.name for n in sg.nodes)
    for seed, part in enumerate(parts):
        check(part, seed=seed)


def test_a_lowering_bug_leaves_the_subgraph_whole_and_is_logged(monkeypatch, caplog):
    # the cut runs on every compile before any search's guard: a crash in the lowering must
    # not break the user's torch.compile, and must not pass silently
    import kernelpro_backend.lowering.split as split

    sg = traced_subgraph(lambda x: (torch.softmax(x, -1),), [torch.randn(8, 32)], "reduction")

    def broken(_):
        raise KeyError("a bug")

    monkeypatch.setattr(split, "lower", broken)
    with caplog.at_level("ERROR", logger="kernelpro"):
        assert split_refused([sg]) == [sg]
    assert "lowering inference softmax failed" in caplog.text


def test_an_output_off_the_domain_is_cut_off_with_what_it_depends_on():
    # a VAE's backward joined the KL term's latent gradients [B, 6] to the reconstruction's
    # row reduction over [B, 24]; the [B, 6] output maps onto no point of that domain, but
    # cut off with its own producers it is a pointwise kernel of its own
    def fn(x, z):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return (e / e.sum(-1, keepdim=True), z * 2.0 + 1.0)

    sg = traced_subgraph(fn, [torch.randn(16, 24), torch.randn(16, 6)], "reduction")
    assert isinstance(refusal(sg), MapConflict)
    parts = split_refused([sg])
    assert sorted(p.kind for p in parts) == ["pointwise", "reduction"]
    for seed, part in enumerate(parts):
        check(part, seed=seed)
