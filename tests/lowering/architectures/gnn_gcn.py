import torch
import torch.nn as nn

nodes, feat, hidden, classes = 40, 16, 32, 5


class Model(nn.Module):
    """Two GCN layers as the Kipf & Welling reference writes them with a dense normalised
    adjacency (D^-1/2 (A + I) D^-1/2 computed in the forward), dropout off, and a node
    classification loss."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(feat, hidden)
        self.w2 = nn.Linear(hidden, classes)

    def forward(self, x, adj, y):
        a = adj + torch.eye(nodes)
        d = a.sum(1).rsqrt()
        a = d[:, None] * a * d[None, :]
        h = torch.relu(a @ self.w1(x))
        return nn.functional.cross_entropy(a @ self.w2(h), y)


def get_inputs():
    adj = (torch.rand(nodes, nodes) < 0.1).float()
    return [torch.randn(nodes, feat), adj, torch.randint(0, classes, (nodes,))]


def get_init_inputs():
    return []
