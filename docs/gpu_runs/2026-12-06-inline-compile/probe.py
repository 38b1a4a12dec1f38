"""Probe: where a training step's compile time goes when kernelpro serves kernels at many call
sites (the warm-up's in-context check compiled an hf_bert step in ~9 s without kernels and
~70 s with 2-4 distinct kernels served at 12-24 sites each; BENCHMARKS.md).

A 12-block model (LayerNorm -> Linear -> GELU -> Linear, residual), forward and backward,
compiled four ways after `torch._dynamo.reset()`: no kernel; every LayerNorm/pointwise
subgraph that lowers served its default kernel (lower + build_kernel, no search; one kernel
object per subgraph key, as the finder serves them), inlined into Inductor's graph (launch
"inline", the default), with torch's access analysis once per site ("memo off") and memoised
per kernel and signature (rewrite/access_memo.py, "memo on"); the same kernels through the
opaque `kernelpro::launch` op. Each compile + first step is timed, the inlined ones under cProfile:
the cumulative seconds in Triton's TTIR generation and Inductor's kernel-mutation analysis
(torch._higher_order_ops.triton_kernel_wrap), kernelpro's tracing (rewrite/inline.py) and
Inductor's compile_fx are printed.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-inline-compile/probe.py

Env: PROBE_BLOCKS (12). Writes $OUT/inline_compile.json; prints a table last.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import time

import torch

# every compile compiles: no FX-graph or AOT-autograd cache hit from an earlier row
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

from kernelpro_backend import make_backend  # noqa: E402
from kernelpro_backend.lowering import lower  # noqa: E402
from kernelpro_backend.rewrite import access_memo  # noqa: E402
from kernelpro_backend.runtime.spec_kernel import build_kernel  # noqa: E402

BLOCKS = int(os.environ.get("PROBE_BLOCKS", "12"))
WATCH = (
    "generate_ttir",
    "identify_mutated_tensors",
    "identify_accessed_tensors",
    "trace_kernel",
    "compile_fx_inner",
    "aot_module_simplified",
)


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Served:
    """Every norm/pointwise/reduction subgraph that lowers, on its default kernel."""

    def __init__(self) -> None:
        self.sites, self.failed = 0, 0
        self.built: dict = {}

    def find(self, sg):  # type: ignore[no-untyped-def]
        if sg.kind not in ("pointwise", "reduction", "norm") and sg.pattern not in ("norm",):
            return None
        key = repr(sg.key)
        if key not in self.built:
            try:
                self.built[key] = build_kernel(lower(sg))
            except Exception:
                self.built[key] = None
        if self.built[key] is None:
            self.failed += 1
            return None
        self.sites += 1
        return self.built[key]


def compile_once(provider, launch: str, profile: bool, memo: bool = True) -> dict:  # type: ignore[no-untyped-def]
    torch._dynamo.reset()
    access_memo.uninstall()
    install = access_memo.install
    if not memo:  # trace_kernel installs it: keep torch's own analysis for this compile
        access_memo.install = lambda: False  # type: ignore[assignment]
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(1024) for _ in range(BLOCKS)]).cuda()
    x = torch.randn(8, 512, 1024, device="cuda", requires_grad=True)
    opts = {"launch": launch, "search": "cache-only", "cache_dir": os.environ.get("OUT", "/tmp")}
    compiled = torch.compile(model, backend=make_backend(provider=provider), options=opts)
    prof = cProfile.Profile() if profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    compiled(x).float().square().mean().backward()
    torch.cuda.synchronize()
    if prof:
        prof.disable()
    access_memo.install = install  # type: ignore[assignment]
    row: dict = {"launch": launch, "memo": memo, "compile_s": round(time.perf_counter() - t0, 2)}
    if provider is not None:
        row.update(sites=provider.sites, failed=provider.failed)
    if prof:
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        for name in WATCH:
            calls = [(v[0], v[3]) for k, v in stats.items() if k[2] == name]
            row[name] = (sum(c for c, _ in calls), round(max((t for _, t in calls), default=0), 2))
    return row


def main() -> None:
    rows = [
        compile_once(None, "inline", False),
        # memo on first: the Triton kernels the second inlined compile shares come from the
        # disk cache, which favours the memo-off row (the comparison errs against the memo)
        compile_once(Served(), "inline", True, memo=True),
        compile_once(Served(), "inline", True, memo=False),
        compile_once(Served(), "op", False),
    ]
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "inline_compile.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
