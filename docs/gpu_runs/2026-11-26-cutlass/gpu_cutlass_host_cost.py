"""Driver: the host time of one call of a CUTLASS GEMM kernel (kernelpro::cutlass_gemm through
its generated module) against the fallback's calls for the same subgraph, on a GEMM so small
that the GPU waits for the host: back-to-back calls, one synchronize at the end, wall time per
call. What a replaced subgraph costs beyond its GPU time (the launch path's minimum gain).

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-cutlass/gpu_cutlass_host_cost.py
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.nn.functional as F

from kernelpro_backend.bench.gemm_sweep import gemm_subgraph
from kernelpro_backend.codegen import build
from kernelpro_backend.codegen.cutlass_match import cutlass_specs
from kernelpro_backend.lowering import lower
from kernelpro_backend.paths import CacheLayout
from kernelpro_backend.runtime.cuda.host import use_library_dir
from kernelpro_backend.tuner.cutlass_builds import CutlassBuilds

CALLS = 2000


class _LinearGelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(256, 512)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def _us_per_call(fn) -> float:  # type: ignore[no-untyped-def]
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def main() -> int:
    out = os.environ.get("OUT", ".")
    root = CacheLayout.of(os.path.join(out, "cache")).cubin_root
    use_library_dir(root)
    model = _LinearGelu().cuda().bfloat16()
    x = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        sg = gemm_subgraph(model, (x,), "ieee")
        seed = lower(sg)
        spec = cutlass_specs(seed)[0]
        t0 = time.time()
        assert CutlassBuilds(root, 1).build([spec], timeout_s=600)
        built_s = time.time() - t0
        inputs = sg.make_inputs(0, "cuda")
        cutlass, triton = build(spec), build(seed)
        module = sg.module()
        inductor = torch.compile(module)
        inductor(*inputs)
        row = {
            "build_s": round(built_s, 1),
            "cutlass_module_us": _us_per_call(lambda: cutlass(*inputs)),
            "triton_seed_us": _us_per_call(lambda: triton(*inputs)),
            "eager_aten_us": _us_per_call(lambda: module(*inputs)),
            "inductor_us": _us_per_call(lambda: inductor(*inputs)),
            "f_linear_us": _us_per_call(lambda: model(x)),
        }
    row = {k: round(v, 1) for k, v in row.items()}
    with open(os.path.join(out, "gpu_cutlass_host_cost.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "calls": CALLS, **row}, f, indent=1)
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
