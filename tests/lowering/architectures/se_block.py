import torch
import torch.nn as nn

batch, ch, hw, red = 4, 32, 6, 8


class Model(nn.Module):
    """EfficientNet's squeeze-and-excitation with a SiLU-gated MBConv tail, its 1x1 convs as
    Linear layers over channels-last features (as timm's SqueezeExcite does with linear
    weights), a residual and LayerNorm."""

    def __init__(self):
        super().__init__()
        self.reduce = nn.Linear(ch, ch // red)
        self.expand = nn.Linear(ch // red, ch)
        self.proj = nn.Linear(ch, ch)
        self.norm = nn.LayerNorm(ch)

    def forward(self, x):  # x: [B, H, W, C]
        s = x.mean(dim=(1, 2), keepdim=True)
        s = torch.sigmoid(self.expand(torch.nn.functional.silu(self.reduce(s))))
        y = self.proj(x * s)
        return self.norm(x + y).square().mean()


def get_inputs():
    return [torch.randn(batch, hw, hw, ch)]


def get_init_inputs():
    return []
