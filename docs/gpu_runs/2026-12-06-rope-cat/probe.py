"""Probe: RoPE as Hugging Face writes it (rotate_half's cat), its subgraphs fused with the cat
(lowering/pieces.py), each lowered default kernel against Inductor's code for the same subgraph,
forward and backward, at a Llama-like size in bf16 and float32. Checks each kernel against the
subgraph's float32 result first: no further from it than
eager and Inductor in the same dtype (tests/lowering/test_pieces_gpu.py's rule). CUDA events, interleaved rounds, median.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-rope-cat/probe.py

Env: PROBE_ROUNDS (default 5). Writes $OUT/rope_cat.json; prints a table last.
"""

from __future__ import annotations

import json
import os
import statistics

import torch

from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel

ITERS = 20


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rope(torch.nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.qkv, self.heads = torch.nn.Linear(d, 3 * d), heads

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def time_ms(fn, inputs: list[torch.Tensor]) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn(*inputs)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / ITERS


def run(dtype: torch.dtype, rounds: int) -> list[dict]:
    b, s, d, heads = 4, 2048, 4096, 32
    model = Rope(d, heads).cuda().to(dtype)
    x = torch.randn(b, s, d, device="cuda", dtype=dtype, requires_grad=True)
    cos, sin = (torch.randn(s, d // heads, device="cuda", dtype=dtype) for _ in range(2))
    rows = []
    for sg in find_subgraphs(model, x, cos, sin):
        if not {"cat", "slice_scatter"} & set(sg.ops):
            continue
        inputs = sg.make_inputs(0, "cuda")
        kp, ref = build_kernel(lower(sg)), sg.module()
        ind = torch.compile(sg.module(), dynamic=False)
        want, got, via = ref(*inputs), kp(*inputs), ind(*inputs)
        exact = sg.module().float()(*(t.float() if t.is_floating_point() else t for t in inputs))
        for w, g, v, x in zip(want, got, via, exact, strict=True):
            # the kernel no further from the float32 result than eager (and Inductor) in dtype:
            # the rule of tests/lowering/test_pieces_gpu.py; equal dtypes round alike to 1 ulp
            x = x.float()
            worst = max((w.float() - x).norm(), (v.float() - x).norm())
            assert (g.float() - x).norm() <= 2 * worst + 1e-6 * x.norm(), (sg.ops, dtype)
        times: dict[str, list[float]] = {"kernelpro": [], "inductor": []}
        for _ in range(rounds):
            times["kernelpro"].append(time_ms(kp, inputs))
            times["inductor"].append(time_ms(ind, inputs))
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append({
            "graph": sg.graph, "dtype": str(dtype).removeprefix("torch."), "ops": " ".join(sg.ops)[:60],
            "kernelpro_ms": round(med["kernelpro"], 4), "inductor_ms": round(med["inductor"], 4),
            "speedup": round(med["inductor"] / med["kernelpro"], 3),
        })  # fmt: skip
    return rows


def main() -> None:
    rounds = int(os.environ.get("PROBE_ROUNDS", "5"))
    rows = run(torch.bfloat16, rounds) + run(torch.float32, rounds)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "rope_cat.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print(f"{'graph':9} {'dtype':9} {'kernelpro':>10} {'inductor':>10} {'x':>6}  ops")
    for r in rows:
        print(
            f"{r['graph']:9} {r['dtype']:9} {r['kernelpro_ms']:10.4f} {r['inductor_ms']:10.4f} "
            f"{r['speedup']:6.3f}  {r['ops']}"
        )


if __name__ == "__main__":
    main()
