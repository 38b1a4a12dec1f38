"""The float32 precision policy as PyTorch's global matmul settings, for the duration of a block.

Owns: `precision_mode`. validate.py, the worker and the ncu child enter it; it imports nothing
of the package, so any of them can.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def precision_mode(precision: str) -> Iterator[None]:
    """PyTorch's float32 matmul mode for the policy: ieee -> highest, tf32/tf32x3 -> high."""
    old = torch.get_float32_matmul_precision()
    old_cudnn = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest" if precision == "ieee" else "high")
    torch.backends.cudnn.allow_tf32 = precision != "ieee"
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)
        torch.backends.cudnn.allow_tf32 = old_cudnn
