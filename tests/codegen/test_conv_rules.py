"""conv_rules' seed tiles: float32 convolutions (tf32) are offered the tf32 GEMM form's wide
tile, 128 x 256 x 32 over 8 warps and 3 stages, which fits the shared memory where the 16-bit
wide seeds (BLOCK_K 64) do not."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from harness import decomposed_subgraph

from kernelpro_backend.codegen import seed_configs
from kernelpro_backend.lowering import lower

WIDE = (("BLOCK_M", 128), ("BLOCK_N", 256), ("BLOCK_K", 32), ("num_warps", 8), ("num_stages", 3))


def _seeds(dtype: torch.dtype) -> list[dict]:
    x, w = torch.randn(8, 256, 14, 14, dtype=dtype), torch.randn(256, 256, 3, 3, dtype=dtype)
    sg = decomposed_subgraph(lambda x, w: (F.conv2d(x, w, padding=1),), x, w)
    return [dict(s.knobs) for s in seed_configs(lower(sg))]


def test_float32_seeds_include_the_tf32_gemm_tile() -> None:
    f32 = _seeds(torch.float32)
    assert any(all(k[n] == v for n, v in WIDE) for k in f32)
    assert all(k["BLOCK_K"] == 32 for k in f32 if k["BLOCK_N"] == 256)  # 64 does not fit
    bf16 = _seeds(torch.bfloat16)
    assert not any(all(k[n] == v for n, v in WIDE) for k in bf16)
