"""LM head + cross-entropy training step on the GPU (8192 tokens x 1024 -> 32000, bf16): eager,
Inductor and kernelpro with the chunked linear+cross-entropy rewrite; step time and peak memory,
each mode twice.

PYTHONPATH=. python scripts/gpu_lm_head_loss.py
"""

from __future__ import annotations

import torch
from scripts_common import measure_step

from kernelpro_backend import make_backend
from kernelpro_backend.bench import models

N, D, V = 8192, 1024, 32000


def main() -> None:
    torch.manual_seed(0)
    base = models.LMHeadLoss(D, V).cuda().bfloat16()
    h = torch.randn(N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, V, (N,), device="cuda")
    options = {"progress": False, "rewrite_linear_cross_entropy": True}
    for mode in ("eager", "inductor", "kernelpro") * 2:
        torch._dynamo.reset()
        model = models.LMHeadLoss(D, V).cuda().bfloat16()
        model.load_state_dict(base.state_dict())
        if mode == "inductor":
            fn = torch.compile(model)
        elif mode == "kernelpro":
            fn = torch.compile(model, backend=make_backend(), options=options)
        else:
            fn = model

        def step(model=model, fn=fn) -> torch.Tensor:
            h.grad = None
            model.zero_grad(set_to_none=True)
            loss = fn(h, t)
            loss.backward()
            return loss

        print(mode, measure_step(step), flush=True)


if __name__ == "__main__":
    main()
