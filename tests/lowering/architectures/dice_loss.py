import torch
import torch.nn as nn

batch, classes, hw, ch = 2, 3, 12, 8


class Model(nn.Module):
    """A segmentation head's soft Dice loss plus BCE, as MONAI-style code writes them: a
    per-pixel linear classifier over channels-last features, sigmoid, per-class intersection
    and sums over the spatial dims, and 1 - dice averaged."""

    def __init__(self):
        super().__init__()
        self.cls = nn.Linear(ch, classes)

    def forward(self, feats, target):
        logits = self.cls(feats).permute(0, 3, 1, 2)  # [B, C, H, W]
        p = torch.sigmoid(logits)
        inter = (p * target).sum(dim=(2, 3))
        denom = p.sum(dim=(2, 3)) + target.sum(dim=(2, 3))
        dice = 1 - (2 * inter + 1e-5) / (denom + 1e-5)
        bce = nn.functional.binary_cross_entropy_with_logits(logits, target)
        return dice.mean() + bce


def get_inputs():
    return [torch.randn(batch, hw, hw, ch), torch.rand(batch, classes, hw, hw).round()]


def get_init_inputs():
    return []
