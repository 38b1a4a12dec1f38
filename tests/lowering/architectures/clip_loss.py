import torch
import torch.nn as nn
import torch.nn.functional as F

batch, dim_img, dim_txt, emb = 16, 40, 36, 32


class Model(nn.Module):
    """CLIP's contrastive head as open_clip writes it: both projections, L2-normalised
    features, a learned logit scale, and the symmetric cross-entropy over the logits and their
    transpose."""

    def __init__(self):
        super().__init__()
        self.img_proj = nn.Linear(dim_img, emb, bias=False)
        self.txt_proj = nn.Linear(dim_txt, emb, bias=False)
        self.logit_scale = nn.Parameter(torch.ones([]) * 2.6592)

    def forward(self, img, txt):
        i = F.normalize(self.img_proj(img), dim=-1)
        t = F.normalize(self.txt_proj(txt), dim=-1)
        logits_per_image = self.logit_scale.exp() * i @ t.T
        logits_per_text = logits_per_image.T
        labels = torch.arange(img.shape[0], device=img.device)
        return (
            F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)
        ) / 2


def get_inputs():
    return [torch.randn(batch, dim_img), torch.randn(batch, dim_txt)]


def get_init_inputs():
    return []
