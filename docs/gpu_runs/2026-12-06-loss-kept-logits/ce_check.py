"""Probe: kernelpro::cross_entropy (logits kept, bf16) on the GPU against F.cross_entropy on
upcast logits, eager and Inductor: error against float64 and forward + backward ms. Decided
FUSED_MIN_COLUMNS in fx_passes/linear_ce_rewrite.py (BENCHMARKS.md, "Loss on kept logits").
The run that decided also read a peak-memory figure after a warm call; it is not used."""

import json
import os

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import kernelpro_backend.ops.cross_entropy  # noqa: F401  registers the op


def measure(base: torch.Tensor, t: torch.Tensor, fn) -> dict:
    x64 = base.double().requires_grad_()
    ref = F.cross_entropy(x64, t, ignore_index=-100)
    ref.backward()
    x = base.clone().requires_grad_()
    loss = fn(x, t)
    loss.backward()
    grad_err = ((x.grad.double() - x64.grad).norm() / x64.grad.norm()).item()

    def step() -> None:
        x.grad = None
        fn(x, t).backward()

    ms = do_bench(step, warmup=25, rep=200)
    return {"ms": round(ms, 4), "loss_err": abs(loss.item() - ref.item()), "grad_rel_err": grad_err}


def main() -> None:
    def eager(x, t):
        return F.cross_entropy(x.float(), t, ignore_index=-100)

    def ours(x, t):
        return torch.ops.kernelpro.cross_entropy(x, t, -100, "mean", torch.float32)[0]

    modes = {"eager": eager, "inductor": torch.compile(eager), "kernelpro": ours}
    out = {}
    for rows, vocab in ((8192, 32000), (1337, 50257), (8192, 128256)):
        torch.manual_seed(0)
        base = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16) * 3
        t = torch.randint(0, vocab, (rows,), device="cuda")
        t[::7] = -100
        out[f"{rows}x{vocab}"] = {name: measure(base, t, fn) for name, fn in modes.items()}
        print(rows, vocab, out[f"{rows}x{vocab}"], flush=True)
    with open(os.path.join(os.environ["OUT"], "ce_check.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
