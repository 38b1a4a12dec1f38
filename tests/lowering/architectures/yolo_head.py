import torch
import torch.nn as nn

batch, anchors, grid, classes = 2, 3, 8, 6


class Model(nn.Module):
    """A YOLOv5 detection head's decode and a simplified loss: sigmoid of the raw outputs,
    xy = (2 s - 0.5 + grid) * stride, wh = (2 s)^2 * anchor, objectness BCE and a box L1,
    over a [B, A, H, W, 5 + C] view of the head's channels."""

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(16, anchors * (5 + classes))
        self.register_buffer("anchor_wh", torch.tensor([[10.0, 13.0], [16.0, 30.0], [33.0, 23.0]]))
        gy, gx = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
        self.register_buffer("grid_xy", torch.stack((gx, gy), -1).float())

    def forward(self, feats, target_box, target_obj):
        p = self.head(feats)  # [B, H, W, A * (5 + C)]
        p = p.view(batch, grid, grid, anchors, 5 + classes).permute(0, 3, 1, 2, 4)
        s = p.sigmoid()
        xy = (s[..., :2] * 2 - 0.5 + self.grid_xy) * 8.0
        wh = (s[..., 2:4] * 2) ** 2 * self.anchor_wh.view(1, anchors, 1, 1, 2)
        box = torch.cat((xy, wh), -1)
        obj = nn.functional.binary_cross_entropy_with_logits(p[..., 4], target_obj)
        return obj + (box - target_box).abs().mean() * 0.01


def get_inputs():
    return [
        torch.randn(batch, grid, grid, 16),
        torch.rand(batch, anchors, grid, grid, 4) * 64,
        torch.rand(batch, anchors, grid, grid).round(),
    ]


def get_init_inputs():
    return []
