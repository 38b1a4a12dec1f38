"""Shared test set-up: the `gpu` marker skips cleanly without CUDA; helpers to train models."""

from __future__ import annotations

import os

import pytest
import torch

# Without a GPU, Triton kernels run on CPU tensors through Triton's interpreter. Set it before
# triton is imported (spawned workers inherit it). On a GPU machine the real compiler runs.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
