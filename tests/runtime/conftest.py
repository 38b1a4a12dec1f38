import pytest
import torch
from runtime_helpers import subgraphs_of


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
