"""GPU: what replacing a subgraph costs on the host. Times, per call, a tiny pointwise subgraph
run (1) as one eager aten op, (2) as our Triton kernel called directly, (3) through the
kernelpro::launch custom op, (4) inside a torch.compile'd function where kernelpro replaced it
through that op, (5) the same with the kernel inlined (Inductor launches it from its generated
code), vs (6) the same function compiled by plain Inductor. Host-bound on purpose (1024 elements).

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

    # One code object per compiled variant, so no variant reuses another's dynamo cache entry.
    def f_op(t):
        return (t * 2 + 1).relu()

    def f_inline(t):
        return (t * 2 + 1).relu()

    def f_inductor(t):
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
            return kernel  # a SpecKernel: traceable, so Inductor can inline it

    torch._dynamo.reset()
    sessions: list = []
    backend = make_backend(provider=Provider(), sessions=sessions)
    ours = torch.compile(f_op, backend=backend, options={"search": "on-miss", "launch": "op"})
    inlined = torch.compile(f_inline, backend=backend, options={"search": "on-miss"})
    ind = torch.compile(f_inductor)
    with torch.no_grad():
        rows = {
            "eager aten ops (3)": per_call_us(lambda: f(x)),
            "triton kernel, direct": per_call_us(lambda: kernel(x)),
            "kernelpro::launch op": per_call_us(
                lambda: torch.ops.kernelpro.launch("overhead-probe", [x])
            ),
            "compiled fn, kernel via op": per_call_us(lambda: ours(x)),
            "compiled fn, kernel inlined": per_call_us(lambda: inlined(x)),
            "compiled fn, plain Inductor": per_call_us(lambda: ind(x)),
        }
        torch.testing.assert_close(inlined(x), f(x))
        torch.testing.assert_close(ours(x), f(x))
    rows["inlined kernels"] = sum(len(r.inlined) for s in sessions for r in s.reports)
    with open(os.path.join(os.environ.get("OUT", "."), "launch_overhead.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    print(f"\n{torch.cuda.get_device_name()}  host time per call, 1024-element pointwise subgraph")
    for k, v in rows.items():
        print(f"  {k:<32}{v:8.1f} us" if isinstance(v, float) else f"  {k:<32}{v:8d}")


if __name__ == "__main__":
    main()
