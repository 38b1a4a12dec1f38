"""A hand-written-attention GPT training step on the GPU (2 layers, width 512, 8 heads, seq 1024,
batch 4, vocab 4096, bf16): eager, Inductor, and kernelpro with and without the attention
rewrite; step time and peak memory.

PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-25-lm-head-loss/gpu_attention_step.py
"""

from __future__ import annotations

import torch
from scripts_common import measure_step

from kernelpro_backend import make_backend
from kernelpro_backend.bench import models


def make() -> torch.nn.Module:
    return models.HandwrittenGPT(vocab=4096, dim=512, heads=8, layers=2, seq=1024).cuda().bfloat16()


def main() -> None:
    torch.manual_seed(0)
    base = make()
    ids = torch.randint(0, 4096, (4, 1024), device="cuda")
    targets = torch.randint(0, 4096, (4, 1024), device="cuda")
    for mode in ("eager", "inductor", "kp_rewrite", "kp_norewrite", "inductor", "kp_rewrite"):
        torch._dynamo.reset()
        model = make()
        model.load_state_dict(base.state_dict())
        options = {"progress": False, "rewrite_attention": mode == "kp_rewrite"}
        if mode == "inductor":
            fn = torch.compile(model)
        elif mode.startswith("kp_"):
            fn = torch.compile(model, backend=make_backend(), options=options)
        else:
            fn = model

        def step(model=model, fn=fn) -> torch.Tensor:
            model.zero_grad(set_to_none=True)
            loss = fn(ids, targets)
            loss.backward()
            return loss

        print(mode, measure_step(step, repeats=15), flush=True)


if __name__ == "__main__":
    main()
