import torch
import torch.nn as nn


class Model(nn.Module):
    """float32 softmax over rows of 262144 (issue [rows])."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 262144


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
