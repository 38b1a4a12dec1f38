import torch
import torch.nn as nn

batch, points, classes = 4, 64, 5


class Model(nn.Module):
    """PointNet's classifier without the T-nets: a shared per-point MLP, max pooling over the
    points, the global feature concatenated back to every point for a segmentation head, and
    both losses."""

    def __init__(self):
        super().__init__()
        self.mlp1 = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 64), nn.ReLU())
        self.cls = nn.Linear(64, classes)
        self.seg = nn.Sequential(nn.Linear(128, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, pts, y, seg_y):
        f = self.mlp1(pts)  # [B, N, 64]
        g = f.max(dim=1).values
        cls_loss = nn.functional.cross_entropy(self.cls(g), y)
        h = torch.cat([f, g[:, None, :].expand(-1, points, -1)], -1)
        seg_logits = self.seg(h)
        seg_loss = nn.functional.cross_entropy(seg_logits.reshape(-1, 2), seg_y.reshape(-1))
        return cls_loss + seg_loss


def get_inputs():
    return [
        torch.randn(batch, points, 3),
        torch.randint(0, classes, (batch,)),
        torch.randint(0, 2, (batch, points)),
    ]


def get_init_inputs():
    return []
