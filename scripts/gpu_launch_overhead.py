"""GPU: what replacing a subgraph costs on the host. Times, per call, a tiny pointwise subgraph
run (1) as one eager aten op, (2) as our Triton kernel called directly, (3) through the
kernelpro::launch custom op, (4) inside a torch.compile'd function where kernelpro replaced it,
vs (5) the same function compiled by plain Inductor. Host-bound on purpose (1024 elements).

    OUT=/tmp/out python3 scripts/gpu_launch_overhead.py
"""

from __future__ import annotations

import json
import os
import time

import torch

from kernelpro_backend import make_backend
from kernelpro_backend.codegen import build, lower
from kernelpro_backend.kernel_op import KERNELS, RegisteredKernel
from kernelpro_backend.providers import CallableKernel


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    x = torch.randn(1024, device="cuda")

    def f(t):
        return (t * 2 + 1).relu()

    found = []
    with torch.no_grad():
        torch.compile(
            f,
            backend=make_backend(observer=lambda k, s: found.extend(s)),
            options={"fallback": "eager", "search": "off"},
        )(x)
    sg = found[0]
    kernel = build(lower(sg))
    KERNELS.register(
        "overhead-probe", RegisteredKernel(CallableKernel("probe", kernel), sg.output_meta, "cuda")
    )

    class Provider:
        def find(self, s):
            return CallableKernel("probe", kernel)

    torch._dynamo.reset()
    ours = torch.compile(
        f, backend=make_backend(provider=Provider()), options={"search": "on-miss"}
    )
    torch._dynamo.reset()
    ind = torch.compile(f)
    with torch.no_grad():
        rows = {
            "eager aten ops (3)": per_call_us(lambda: f(x)),
            "triton kernel, direct": per_call_us(lambda: kernel(x)),
            "kernelpro::launch op": per_call_us(
                lambda: torch.ops.kernelpro.launch("overhead-probe", [x])
            ),
            "compiled fn, kernelpro kernel": per_call_us(lambda: ours(x)),
            "compiled fn, plain Inductor": per_call_us(lambda: ind(x)),
        }
    with open(os.path.join(os.environ.get("OUT", "."), "launch_overhead.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    print(f"\n{torch.cuda.get_device_name()}  host time per call, 1024-element pointwise subgraph")
    for k, v in rows.items():
        print(f"  {k:<32}{v:8.1f} us")


if __name__ == "__main__":
    main()
