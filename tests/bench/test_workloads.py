import pytest
import torch
import torch.nn.functional as F

from kernelpro_backend.bench import models
from kernelpro_backend.bench.conv_layers import CONV_LAYERS, LAYERS
from kernelpro_backend.bench.workloads import OP_WORKLOADS, TRAINING_WORKLOADS, WORKLOADS

CPU = torch.device("cpu")


@pytest.mark.parametrize("name", [*TRAINING_WORKLOADS, *OP_WORKLOADS])
def test_tiny_workload_runs_eagerly_on_cpu(name):
    w = WORKLOADS[name](CPU, None, "tiny")
    assert w.name == name
    assert w.dtype == torch.float32  # CPU default
    assert w.training == (name in TRAINING_WORKLOADS)
    model = w.fresh_model()
    out = model(*w.inputs)
    assert torch.isfinite(out).all()
    if w.training:
        assert w.make_optimizer is not None and w.loss_fn is not None
        w.loss_fn(out).backward()
        grads = [p.grad for p in model.parameters()]
        assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
        # The copy is independent: the original model has no gradients.
        assert all(p.grad is None for p in w.model.parameters())


def test_registry_has_the_briefs_workloads():
    # the brief's four, a language model's head + loss (where the fused cross-entropy runs), and
    # a GPT written as users write one (hand-written attention, 32k vocabulary at full size)
    assert set(TRAINING_WORKLOADS) == {
        "gpt_block",
        "mlp",
        "convnet",
        "moe",
        "lm_head",
        "mini_gpt",
        "gpt2_small",
    }
    assert set(OP_WORKLOADS) == {
        "layer_norm", "rms_norm", "softmax", "cross_entropy", "gemm_bias_gelu", "attention",
    }  # fmt: skip


def test_unknown_size_is_rejected():
    with pytest.raises(ValueError, match="tiny"):
        WORKLOADS["softmax"](CPU, None, "huge")


def test_explicit_dtype_wins():
    w = WORKLOADS["gpt_block"](CPU, torch.bfloat16, "tiny")
    assert w.dtype == torch.bfloat16
    assert w.inputs[0].dtype == torch.bfloat16
    assert next(w.model.parameters()).dtype == torch.bfloat16


def _moe_by_loops(moe: models.TopTwoMoE, x: torch.Tensor) -> torch.Tensor:
    """Top-2 MoE written token by token (no capacity limit)."""
    flat = x.reshape(-1, x.shape[-1])
    probs = torch.softmax(flat.float() @ moe.router.weight.float().t(), dim=-1)
    gate, expert = probs.topk(2, dim=-1)
    gate = gate / gate.sum(-1, keepdim=True)
    out = torch.zeros_like(flat)
    for t in range(flat.shape[0]):
        for k in range(2):
            e = int(expert[t, k])
            y = F.gelu(flat[t] @ moe.w_in[e]) @ moe.w_out[e]
            out[t] += gate[t, k].to(flat.dtype) * y
    return out.view(x.shape)


def test_moe_dispatch_equals_per_token_loops_when_capacity_suffices():
    torch.manual_seed(0)
    moe = models.TopTwoMoE(dim=16, hidden=24, experts=8, capacity_factor=4.0)  # no drops
    x = torch.randn(2, 10, 16)
    torch.testing.assert_close(moe(x), _moe_by_loops(moe, x), rtol=1e-5, atol=1e-5)


def test_moe_drops_tokens_past_capacity():
    torch.manual_seed(0)
    moe = models.TopTwoMoE(dim=8, hidden=8, experts=8, capacity_factor=0.25)
    with torch.no_grad():  # route every token to experts 0 and 1
        moe.router.weight.zero_()
        moe.router.weight[0] = 1.0
        moe.router.weight[1] = 0.5
    x = torch.rand(1, 32, 8) + 0.1  # positive, so expert 0 then 1 wins for every token
    out = moe(x).view(32, 8)
    capacity = 2  # ceil(2 * 32 / 8 * 0.25)
    assert out[:capacity].abs().sum(-1).gt(0).all()
    assert out[capacity:].abs().sum() == 0


def test_lm_head_cuts_into_the_head_gemm_and_a_fused_cross_entropy():
    """The vocabulary (300 at "tiny") is wider than a GEMM tile: the head GEMM and the loss are
    separate subgraphs and the loss picks the target inside its row kernel."""
    from kernelpro_backend.bench.sol import workload_subgraphs

    w = WORKLOADS["lm_head"](torch.device("cpu"), None, "tiny")
    forward = [s for s in workload_subgraphs(w) if s.graph == "forward"]
    assert [s.pattern for s in forward if s.kind == "gemm"] == ["mm"]
    assert [s.pattern for s in forward if "gather" in s.ops] == ["cross_entropy"]


@pytest.mark.parametrize("name", sorted(CONV_LAYERS))
def test_a_conv_layers_step_computes_both_gradients_channels_last(name):
    """The conv sweep's layers (run only when named): one conv each, channels-last, whose step
    needs the input's gradient (the scale before it) and the weight's."""
    w = WORKLOADS[name](CPU, None, "tiny")
    assert w.training and name not in OP_WORKLOADS
    model = w.fresh_model()
    x = w.inputs[0]
    assert x.is_contiguous(memory_format=torch.channels_last)
    out = model(x)
    assert out.is_contiguous(memory_format=torch.channels_last)
    w.loss_fn(out).backward()
    assert model.scale.grad is not None and model.conv.weight.grad is not None
    c_in, _, _, kernel, stride, groups = LAYERS[name]
    assert model.conv.kernel_size == (kernel, kernel) and model.conv.stride == (stride, stride)
    assert (model.conv.groups == model.conv.in_channels) == (groups == c_in)
