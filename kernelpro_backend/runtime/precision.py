"""The float32 precision policy as PyTorch's global matmul settings, for the duration of a block.

Owns: `precision_mode`. validate.py, the worker and the ncu child enter it; it imports nothing
of the package, so any of them can.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def precision_mode(
    precision: str, cudnn_benchmark: bool | None = None, cudnn_deterministic: bool | None = None
) -> Iterator[None]:
    """PyTorch's float32 matmul mode for the policy: tf32 -> high (TF32 allowed); ieee and
    tf32x3 -> highest. tf32x3 promises IEEE float32 accuracy from three TF32 products, so its
    reference, the eager error a candidate may match and the baselines it must beat are all
    IEEE float32 — under "high" a candidate as loose as plain TF32 passed, compared with
    cuBLAS's TF32. `cudnn_benchmark`: cuDNN's algorithm search as the user's process has it
    and `cudnn_deterministic`: cuDNN's algorithm choice as the user's process has it (None: as
    it is here), so a convolution's baselines run the algorithms the graph will."""
    old = torch.get_float32_matmul_precision()
    old_cudnn = torch.backends.cudnn.allow_tf32
    old_benchmark = torch.backends.cudnn.benchmark
    old_deterministic = torch.backends.cudnn.deterministic
    tf32 = precision == "tf32"
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32
    if cudnn_benchmark is not None:
        torch.backends.cudnn.benchmark = cudnn_benchmark
    if cudnn_deterministic is not None:
        torch.backends.cudnn.deterministic = cudnn_deterministic
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)
        torch.backends.cudnn.allow_tf32 = old_cudnn
        torch.backends.cudnn.benchmark = old_benchmark
        torch.backends.cudnn.deterministic = old_deterministic
