"""Coverage over the project's example models: how many subgraphs (forward and backward) lower
to a template and match the reference: all 58 today, with the convolutions forward (implicit
GEMM + epilogue) and backward (dgrad, wgrad) and the attention forward and backward. (Before a GEMM's group stopped at its
own output, the conv net's classifier GEMM took in the average pool's backward broadcast to
[N, C, H, W] and could not lower: 56 of 61, the three groups that broadcast then fed being one
now.)"""

from __future__ import annotations

import torch
from harness import check, collect

from kernelpro_backend import examples
from kernelpro_backend.codegen import Unsupported

FLOOR = 58  # subgraphs that lower and pass, out of 58


def test_examples_coverage() -> None:
    passed, unsupported, total = 0, [], 0
    for name in ("mlp", "transformer_block", "convnet"):
        model, inputs = examples.EXAMPLES[name]("cpu")
        for seed, sg in enumerate(collect(model, inputs)):
            total += 1
            try:
                check(sg, seed=seed)
            except Unsupported as e:
                unsupported.append(f"{name} {sg.graph} {sg.pattern}: {e.reason}")
                continue
            passed += 1
    report = "\n".join(unsupported)
    print(f"codegen coverage: {passed}/{total}\n{report}")
    assert passed >= FLOOR, f"{passed}/{total} lowered and matched; unsupported:\n{report}"
    assert passed / total >= 0.9, report
    assert not unsupported, report


def test_convolutions_lower_forward_and_attention_lowers_both_ways() -> None:
    model, inputs = examples.convnet("cpu")
    from kernelpro_backend.lowering import lower

    convs = [sg for sg in collect(model, inputs) if sg.kind == "conv"]
    assert {sg.graph for sg in convs} == {"forward", "backward"}
    for sg in convs:
        assert lower(sg).template == ("conv" if sg.graph == "forward" else "conv_backward")
    q, k, v = (torch.randn(1, 2, 9, 8, requires_grad=True) for _ in range(3))

    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    attention = [sg for sg in collect(Attention(), (q, k, v)) if sg.kind == "attention"]
    forward = [sg for sg in attention if sg.graph == "forward"]
    backward = [sg for sg in attention if sg.graph == "backward"]
    assert forward and backward
    for sg in forward:
        assert lower(sg).template == "attention"
    for sg in backward:
        assert lower(sg).template == "attention_backward"
