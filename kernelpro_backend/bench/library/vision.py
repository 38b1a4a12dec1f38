"""The corpus's image classifiers from `transformers`: ViT, ConvNeXt and Swin training steps as
their users write them.

Owns: one factory per model, `(device, dtype, size) -> Workload`, with the published
configuration of a real checkpoint at "full" (ImageNet: 224x224 images, 1000 classes, random
weights) and a 2-stage, width-16-to-64 one on 32x32 images at "tiny" (CPU tests).
Must not: import `transformers` at import time, download anything, or time and compare.

Each step: the model called with `pixel_values=` and `labels=` under bf16 autocast on CUDA
(float32 weights, fused AdamW), returning its ImageClassifierOutput; the bench's loss is `.loss`.
Dropout and drop-path are 0 so that every mode's first step can be checked against eager.
"""

from __future__ import annotations

from typing import Any

import torch

from ..workload import Workload, check_size
from .step import LibraryStep, adamw, autocast_dtype, autocast_for, require, returned_loss, seeded

CLASSES = {"tiny": 10, "full": 1000}


def _classifier(
    name: str, model_cls: str, config: Any, batch: int, image: int, device: torch.device,
    dtype: torch.dtype, size: str,
) -> Workload:  # fmt: skip
    tf = require("transformers")
    with seeded(device):
        model = getattr(tf, model_cls)(config)
        pixels = torch.randn(batch, 3, image, image, device=device)
        labels = torch.randint(0, CLASSES[size], (batch,), device=device)
    step = LibraryStep(model, ("pixel_values", "labels"), device, autocast_for(dtype))
    return Workload(
        name, step, (pixels, labels), dtype, size, returned_loss, adamw, source="library"
    )


def hf_vit(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """ViT-B/16 training step (ViTForImageClassification): batch 128 of 224x224 images (197
    tokens each), width 768, 12 layers; peak ~10 GiB at "full" (estimated as in text.py)."""
    check_size(size)
    tf = require("transformers")
    tiny = size == "tiny"
    config = tf.ViTConfig(
        hidden_size=64 if tiny else 768, num_hidden_layers=2 if tiny else 12,
        num_attention_heads=4 if tiny else 12, intermediate_size=128 if tiny else 3072,
        image_size=32 if tiny else 224, patch_size=8 if tiny else 16,
        num_labels=CLASSES[size], hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    batch, image = (2, 32) if tiny else (128, 224)
    dt = autocast_dtype(device, dtype)
    return _classifier(
        "hf_vit", "ViTForImageClassification", config, batch, image, device, dt, size
    )


def hf_convnext(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """ConvNeXt-T training step (ConvNextForImageClassification: depthwise 7x7 convs, LayerNorm,
    GELU MLPs, layer scale): batch 128 of 224x224 images; peak not estimated (fake tensors
    cannot build it), ~15 GiB by analogy."""
    check_size(size)
    tf = require("transformers")
    tiny = size == "tiny"
    config = tf.ConvNextConfig(
        num_stages=2 if tiny else 4,
        hidden_sizes=[16, 32] if tiny else [96, 192, 384, 768],
        depths=[1, 1] if tiny else [3, 3, 9, 3],
        num_labels=CLASSES[size], drop_path_rate=0.0, image_size=32 if tiny else 224,
    )  # fmt: skip
    batch, image = (2, 32) if tiny else (128, 224)
    dt = autocast_dtype(device, dtype)
    return _classifier(
        "hf_convnext", "ConvNextForImageClassification", config, batch, image, device, dt, size
    )


def hf_swin(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Swin-T training step (SwinForImageClassification: shifted 7x7 windows, relative position
    bias, patch merging): batch 128 of 224x224 images; peak ~8 GiB at "full"."""
    check_size(size)
    tf = require("transformers")
    tiny = size == "tiny"
    config = tf.SwinConfig(
        image_size=32 if tiny else 224, patch_size=4, embed_dim=16 if tiny else 96,
        depths=[2, 2] if tiny else [2, 2, 6, 2], num_heads=[2, 4] if tiny else [3, 6, 12, 24],
        window_size=4 if tiny else 7, num_labels=CLASSES[size], hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
    )  # fmt: skip
    batch, image = (2, 32) if tiny else (128, 224)
    dt = autocast_dtype(device, dtype)
    return _classifier(
        "hf_swin", "SwinForImageClassification", config, batch, image, device, dt, size
    )
