"""Every template family kernelpro renders, as sources: the seeds of small models' subgraphs
(forward and backward, float32 and bfloat16, attention, long rows), their alternatives
(cuBLASLt, TF32, 3xTF32, CUTLASS, split rows, row clusters), convolutions (implicit GEMM,
depthwise, backward) and each one-knob variant (split-K, TMA loads...). The grammar of outside sources must admit every Triton one of them."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent.parent / "codegen"))

from harness import collect, decomposed_subgraph, traced_subgraph  # noqa: E402
from models import cases  # noqa: E402

from kernelpro_backend.codegen import alternatives, knob_space, render  # noqa: E402
from kernelpro_backend.codegen.cutlass_match import cutlass_specs  # noqa: E402
from kernelpro_backend.lowering import lower  # noqa: E402


class _Attention(nn.Module):
    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class _LongRows(nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        return x.softmax(-1) * 3 + F.layer_norm(x, (8192,))


def _model_seeds() -> list:
    subgraphs = []
    for dtype in (torch.float32, torch.bfloat16):
        for model, inputs in cases(dtype).values():
            subgraphs += collect(model, inputs)
    q = [torch.randn(2, 3, 17, 16, requires_grad=True) for _ in range(3)]
    subgraphs += collect(_Attention(), q)
    subgraphs += collect(_LongRows(), [torch.randn(3, 8192, requires_grad=True)])
    seeds = []
    for sg in subgraphs:
        try:
            seeds.append(lower(sg))
        except Exception:  # noqa: S112 - a subgraph no template takes renders nothing
            continue
    return seeds


def _addmm_then(act):  # type: ignore[no-untyped-def]
    return lambda b, a, c: (act(torch.addmm(b, a, c)),)


def _gemm_seeds() -> list:
    seeds = []
    gemms = [
        (lambda x, w, b: (F.relu(F.linear(x, w, b)),), [(64, 32), (48, 32), (48,)]),
        (lambda x, y: (torch.mm(x, y),), [(40, 24), (24, 56)]),
        (lambda x, y: (F.gelu(torch.mm(x, y)) * 2.0,), [(40, 64), (64, 56)]),
    ]
    for fn, shapes in gemms:
        seed = lower(decomposed_subgraph(fn, *(torch.randn(*s) for s in shapes)))
        seeds += [dataclasses.replace(seed, precision=p) for p in ("ieee", "tf32", "tf32x3")]
    for fn in (lambda p, t: torch.mean((p - t) ** 2), lambda p, t: (p * t).sum(-1)):
        seeds.append(lower(decomposed_subgraph(fn, torch.rand(8, 3000), torch.rand(8, 3000))))
    bf16 = torch.bfloat16
    b, x, w = torch.randn(64, dtype=bf16), torch.randn(48, 32, dtype=bf16), torch.randn(64, 32)
    for act in (F.gelu, lambda y: y * torch.sigmoid(y) * 2.0):
        sg = traced_subgraph(_addmm_then(act), (b, x, w.to(bf16).t()), "gemm")
        seeds += cutlass_specs(lower(sg))
    return seeds


def _conv_relu_residual(kw):  # type: ignore[no-untyped-def]
    return lambda x, w, b, r: (F.relu(F.conv2d(x, w, b, **kw)) + r,)


def _conv_seeds() -> list:
    """Convolutions with a bias + ReLU + residual epilogue: implicit GEMM (grouped, strided,
    dilated; float32 under each precision, channels-last bfloat16), depthwise, 1-D."""
    seeds = []
    for dtype, groups, channels_last in ((torch.float32, 2, False), (torch.bfloat16, 1, True)):
        x, w, b = torch.randn(2, 8, 13, 11), torch.randn(6, 8 // groups, 3, 3), torch.randn(6)
        if channels_last:
            x, w = (t.to(memory_format=torch.channels_last) for t in (x, w))
        x, w, b = (t.to(dtype) for t in (x, w, b))
        kw = dict(stride=2, padding=1, dilation=2, groups=groups)
        r = torch.randn_like(F.conv2d(x, w, b, **kw))
        sg = decomposed_subgraph(_conv_relu_residual(kw), x, w, b, r)
        seed = lower(sg)
        seeds += [dataclasses.replace(seed, precision=p) for p in ("ieee", "tf32", "tf32x3")]
    x, w = torch.randn(2, 8, 13, 11), torch.randn(8, 1, 7, 7)
    seeds.append(
        lower(decomposed_subgraph(lambda x, w: (F.conv2d(x, w, padding=3, groups=8),), x, w))
    )
    block = nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(6, 6, 1))
    for sg in collect(block, [torch.randn(2, 4, 13, 11, requires_grad=True)]):
        if sg.kind == "conv" and sg.graph == "backward":
            seeds.append(lower(sg))
    x, w = torch.randn(2, 6, 17), torch.randn(4, 6, 5)
    seeds.append(lower(decomposed_subgraph(lambda x, w: (F.silu(F.conv1d(x, w)),), x, w)))
    return seeds


def rendered_sources() -> dict[str, tuple[str, str, str]]:
    """{source: (template, language, entry)} over every spec described above."""
    specs = []
    for seed in [*_model_seeds(), *_gemm_seeds(), *_conv_seeds()]:
        specs += [seed, *alternatives(seed)]
    for spec in list(specs):
        for knob, values in knob_space(spec).items():
            for value in values:
                try:
                    specs.append(spec.with_knobs(**{knob: value}))
                except Exception:  # noqa: S112 - an illegal combination is not rendered
                    continue
    out = {}
    for spec in specs:
        try:
            r = render(spec)
        except Exception:  # noqa: S112
            continue
        out[r.source] = (spec.template, r.language, r.entry)
    return out
