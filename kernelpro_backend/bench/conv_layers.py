"""The conv sweep's layers as bench workloads (issue 58): each the training step of one
convolution as a model has it — ResNet-50's stage convs (3x3, 1x1, stride 2), ConvNeXt-T's 7x7
depthwise, MobileNetV2's 3x3 depthwise and 1x1 projection — channels-last, batch 32, float32
(TF32 convolutions, as PyTorch allows them by default and CNNs train) unless a dtype is asked
for. A per-channel scale before the conv makes the step compute the input gradient too, so one
step times the forward and both gradients (the trace splits them by kernel).

    python scripts/gpu_warmup_bench.py --workload conv_r50_s1_3x3 ...
    python scripts/gpu_bench.py --workload conv_r50_s1_3x3 --modes eager,inductor,kernelpro,inductor-max-autotune

Owns: `CONV_LAYERS` (name -> factory, run only when named, as the library corpus is) and
`LAYERS` (their geometry).
Must not: time, compile or compare anything.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

from .workload import Workload, WorkloadFactory, adamw, check_size, resolve_dtype

# name: (in channels, out channels, height = width, kernel, stride, groups)
LAYERS: dict[str, tuple[int, int, int, int, int, int]] = {
    "conv_r50_s1_3x3": (64, 64, 56, 3, 1, 1),
    "conv_r50_s1_1x1_expand": (64, 256, 56, 1, 1, 1),
    "conv_r50_s2_3x3_stride2": (128, 128, 56, 3, 2, 1),
    "conv_r50_s3_3x3": (256, 256, 14, 3, 1, 1),
    "conv_r50_s4_1x1_reduce": (2048, 512, 7, 1, 1, 1),
    "conv_convnext_dw7": (96, 96, 56, 7, 1, 96),
    "conv_mbv2_dw3": (144, 144, 56, 3, 1, 144),
    "conv_mbv2_1x1_project": (144, 24, 56, 1, 1, 1),
}
BATCH = 32


class ScaledConv(nn.Module):
    """conv(x * scale): the learned per-channel scale asks for the input's gradient."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, groups: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1, c_in, 1, 1))
        self.conv = nn.Conv2d(
            c_in, c_out, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x * self.scale)


def _mean_square(out: object) -> torch.Tensor:
    assert isinstance(out, torch.Tensor)
    return out.float().pow(2).mean()


def conv_layer(name: str, device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """One layer of `LAYERS` at "full" (batch 32) or "tiny" (batch 2, an 8x8 image, channels
    divided by 8, at least 8, depthwise kept depthwise)."""
    check_size(size)
    c_in, c_out, hw, kernel, stride, groups = LAYERS[name]
    if size == "tiny":
        depthwise = groups == c_in
        c_in, c_out, hw = max(8, c_in // 8), max(8, c_out // 8), 8
        groups = c_in if depthwise else 1
        c_out = c_in if depthwise else c_out
    batch = BATCH if size == "full" else 2
    dt = resolve_dtype(device, dtype, torch.float32)
    torch.manual_seed(0)
    model = ScaledConv(c_in, c_out, kernel, stride, groups)
    model = model.to(device=device, dtype=dt)
    model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    x = torch.randn(batch, c_in, hw, hw, device=device, dtype=dt)
    x = x.contiguous(memory_format=torch.channels_last)
    return Workload(name, model, (x,), dt, size, _mean_square, adamw)


CONV_LAYERS: dict[str, WorkloadFactory] = {
    name: functools.partial(conv_layer, name) for name in LAYERS
}
