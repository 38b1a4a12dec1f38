"""The torch-level rewrites on CUDA in bf16: a hand-written GPT (attention -> SDPA, LM head +
loss -> the chunked op) trains through kernelpro like eager, within bf16 tolerance."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

from kernelpro_backend import make_backend
from kernelpro_backend.bench import models
from kernelpro_backend.ops.linear_ce import linear_cross_entropy

pytestmark = pytest.mark.gpu


def test_the_chunked_lm_head_loss_matches_eager_on_cuda():
    torch.manual_seed(0)
    x = torch.randn(4096, 512, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(32000, 512, device="cuda", dtype=torch.bfloat16) * 0.05
    t = torch.randint(0, 32000, (4096,), device="cuda")
    t[::7] = -100  # some ignored: the factor rows / counted is not 1
    loss, gx, gw, _, factor = linear_cross_entropy(
        x, w, None, t, -100, "mean", True, True, True, True
    )
    gx, gw = gx * factor, gw * factor
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    ref = F.cross_entropy(F.linear(xr, wr).float(), t, ignore_index=-100)
    ref.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(gx, xr.grad, rtol=3e-2, atol=1e-4)
    torch.testing.assert_close(gw, wr.grad, rtol=3e-2, atol=1e-4)


def _gpt_and_its_twin():
    """A small hand-written GPT in bf16, a copy with its weights for eager, and a batch."""
    torch.manual_seed(0)
    make = lambda: models.HandwrittenGPT(vocab=4096, dim=128, heads=4, layers=2, seq=256)  # noqa: E731
    model = make().cuda().bfloat16()
    ref = make().cuda().bfloat16()
    ref.load_state_dict(model.state_dict())
    ids = torch.randint(0, 4096, (2, 256), device="cuda")
    targets = torch.randint(0, 4096, (2, 256), device="cuda")
    return model, ref, ids, targets


def _attention_nodes_are_causal(subgraphs, found: list[bool]) -> None:
    """Record, for each attention node of the subgraphs, whether it runs causal with no mask: the
    hand-written GPT keeps its mask in a buffer, which the rewrite turns into `is_causal`."""
    for sg in subgraphs:
        for node in sg.nodes:
            schema = getattr(node.target, "_schema", None)
            if (
                schema is None
                or "scaled_dot_product" not in schema.name
                or "backward" in schema.name
            ):
                continue
            named = dict(zip((a.name for a in schema.arguments), node.args, strict=False))
            named.update(node.kwargs)
            mask = named.get("attn_mask", named.get("attn_bias"))
            found.append(named.get("is_causal") is True and mask is None)


def _assert_grads_close(model, ref):
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert p.grad is not None, name
        err = (p.grad.float() - q.grad.float()).norm() / q.grad.float().norm().clamp(min=1e-6)
        assert err < 5e-2, (name, float(err))


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
def test_a_hand_written_gpt_trains_through_the_rewrites_on_cuda(fallback):
    model, ref, ids, targets = _gpt_and_its_twin()
    seen: list[str] = []
    causal: list[bool] = []

    def observe(kind, sgs):
        seen.extend(s.pattern for s in sgs)
        _attention_nodes_are_causal(sgs, causal)

    torch._dynamo.reset()
    compiled = torch.compile(
        model,
        backend=make_backend(observer=observe),
        options={"fallback": fallback, "rewrite_linear_cross_entropy": True},
    )
    loss, ref_loss = compiled(ids, targets), ref(ids, targets)
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=2e-2)
    loss.backward()
    ref_loss.backward()
    _assert_grads_close(model, ref)
    assert "sdpa" in seen and "sdpa_backward" in seen
    assert causal and all(causal), causal  # the buffer's mask became is_causal


@pytest.mark.parametrize(
    "how", [{"options": {"cuda_graphs": True}}, {"mode": "reduce-overhead"}], ids=["option", "mode"]
)
def test_a_hand_written_gpt_replayed_as_cuda_graphs_computes_what_eager_does(how):
    """Four forward + backward calls (cudagraph trees: a warm-up, a recording, two replays) of
    the same weights: every call's loss and the last call's gradients against eager's."""
    model, ref, ids, targets = _gpt_and_its_twin()
    ref_loss = ref(ids, targets)
    ref_loss.backward()
    seen: list[str] = []
    causal: list[bool] = []

    def observe(kind, sgs):
        seen.extend(s.pattern for s in sgs)
        _attention_nodes_are_causal(sgs, causal)

    torch._dynamo.reset()
    counters.clear()
    backend = make_backend(observer=observe)
    compiled = torch.compile(model, backend=backend, **how)
    for _ in range(4):
        model.zero_grad(set_to_none=True)
        loss = compiled(ids, targets)
        loss.backward()
        torch.testing.assert_close(loss.detach().clone(), ref_loss.detach(), rtol=2e-2, atol=2e-2)
    _assert_grads_close(model, ref)
    assert "sdpa" in seen and "sdpa_backward" in seen
    assert causal and all(causal), causal
    assert counters["inductor"]["cudagraph_skips"] == 0  # both graphs replayed, none skipped
    torch._dynamo.reset()
