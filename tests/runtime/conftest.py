import os

# Triton kernels run on CPU tensors through the interpreter; set before triton is imported.
# Spawned workers inherit the environment (the GPU tests start theirs without it).
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from kernelpro_backend.backend import make_backend  # noqa: E402


def subgraphs_of(fn, *args):
    store = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch.compile(fn, backend=backend, options={"fallback": "eager", "search": "off"})(*args)
    return store


def _pointwise(x, y):
    return torch.relu(x * y + 1.0)


def _softmax(x):
    return torch.softmax(x, -1)


@pytest.fixture(scope="session")
def pointwise_subgraph():
    torch._dynamo.reset()
    (sg,) = subgraphs_of(_pointwise, torch.randn(16, 24), torch.randn(16, 24))
    return sg


@pytest.fixture(scope="session")
def softmax_subgraph():
    torch._dynamo.reset()
    (sg,) = subgraphs_of(_softmax, torch.randn(8, 40))
    return sg
