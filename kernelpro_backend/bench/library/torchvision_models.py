"""The corpus's convolutional networks from `torchvision`: ResNet-50, MobileNetV3-Large and
EfficientNet-B0 training steps as their users write them (the ImageNet reference recipe).

Owns: one factory per model, `(device, dtype, size) -> Workload`: 224x224 images, 1000 classes,
at "full" a batch that fills tens of GB (128 for ResNet-50, 512 for the two mobile networks);
32x32 images, 10 classes, batch 2 at "tiny".
Must not: import `torchvision` at import time (a factory imports it and, where it is missing,
raises an ImportError naming it), download weights, or time and compare.

Each step: float32 weights and activations (convolutions in TF32 as PyTorch allows by default),
`criterion(model(images), labels)` with cross-entropy, fused AdamW on CUDA. Dropout is 0 so that
every mode's first step can be checked against eager; BatchNorm trains as usual.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..workload import Workload, check_size, resolve_dtype
from .step import adamw, require, seeded

CLASSES = {"tiny": 10, "full": 1000}


def _cnn(
    name: str,
    builder: str,
    device: torch.device,
    dtype: torch.dtype | None,
    size: str,
    batch: int = 128,
    **kw: object,
) -> Workload:
    check_size(size)
    models = require("torchvision.models")
    dt = resolve_dtype(device, dtype, torch.float32)
    batch, image = (2, 32) if size == "tiny" else (batch, 224)
    with seeded(device):
        model = getattr(models, builder)(weights=None, num_classes=CLASSES[size], **kw)
        model = model.to(dtype=dt)
        images = torch.randn(batch, 3, image, image, device=device, dtype=dt)
        labels = torch.randint(0, CLASSES[size], (batch,), device=device)

    def criterion(out: object) -> torch.Tensor:
        assert isinstance(out, torch.Tensor)
        return F.cross_entropy(out, labels)

    return Workload(name, model, (images,), dt, size, criterion, adamw, source="library")


def tv_resnet50(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """ResNet-50 training step (torchvision, float32, TF32 convs): batch 128 of 224x224 images
    (10.3 GiB peak under Inductor on an H100)."""
    return _cnn("tv_resnet50", "resnet50", device, dtype, size)


def tv_mobilenet_v3(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """MobileNetV3-Large training step (torchvision, float32: depthwise convs, hardswish,
    squeeze-excitation): batch 512 of 224x224 images. At 128 (4.4 GiB peak) an H100 step was
    launch-bound, 23 of 24 ms host time, and its rounds spread 0.72-1.65x: the bench then timed
    Python, not kernels."""
    return _cnn(
        "tv_mobilenet_v3", "mobilenet_v3_large", device, dtype, size, batch=512, dropout=0.0
    )


def tv_efficientnet_b0(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """EfficientNet-B0 training step (torchvision, float32: depthwise convs, SiLU,
    squeeze-excitation; stochastic depth off): batch 512 of 224x224 images (at 128, 6.7 GiB
    peak, an H100 step was launch-bound, as MobileNetV3's)."""
    return _cnn(
        "tv_efficientnet_b0", "efficientnet_b0", device, dtype, size, batch=512,
        dropout=0.0, stochastic_depth_prob=0.0,
    )  # fmt: skip
