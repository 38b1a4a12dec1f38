"""Probe: where a training step's compile time goes when kernelpro serves kernels at many call
sites (the warm-up's in-context check compiled an hf_bert step in ~9 s without kernels and
~70 s with 2-4 distinct kernels served at 12-24 sites each; BENCHMARKS.md).

A 12-block model (LayerNorm -> Linear -> GELU -> Linear, residual), forward and backward,
compiled four ways after `torch._dynamo.reset()`: no kernel; every LayerNorm/pointwise
subgraph that lowers served its default kernel (lower + build_kernel, no search; one kernel
object per subgraph key, as the finder serves them), inlined into Inductor's graph (launch
"inline", the default), with torch's access analysis once per site ("memo off") and memoised
per kernel and signature (rewrite/access_memo.py, "memo on"); the same kernels through the
opaque `kernelpro::launch` op. Each compile + first step is timed. Where its time goes: the
compile's own phase timers (torch._dynamo.utils.compilation_time_metrics, seconds per
`dynamo_timed` phase) and a sampling profiler of every thread (their stacks read every 20 ms;
the backward compiles on the autograd engine's device thread; cProfile counted nothing on the
H200 under Python 3.12, whose cProfile and Dynamo both hook sys.monitoring), the functions most
often on a stack (inclusive) and at its top (self) printed for each row.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-inline-compile/probe.py

Env: PROBE_BLOCKS (12); PROBE_MEMO_OFF=1 adds the inlined compile without the access memo. Writes $OUT/inline_compile.json; prints a table last.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from typing import Any

import torch

# every compile compiles: no FX-graph or AOT-autograd cache hit from an earlier row
os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")

from kernelpro_backend import make_backend  # noqa: E402
from kernelpro_backend.lowering import lower  # noqa: E402
from kernelpro_backend.rewrite import access_memo  # noqa: E402
from kernelpro_backend.runtime.spec_kernel import build_kernel  # noqa: E402

BLOCKS = int(os.environ.get("PROBE_BLOCKS", "12"))
SAMPLE_S = 0.02
SHOWN = 25


class Sampler:
    """Every other thread's stack every SAMPLE_S seconds: per function (file:name), the samples
    with it anywhere on the stack (inclusive) and at its top (self)."""

    def __init__(self) -> None:
        self.inclusive: collections.Counter = collections.Counter()
        self.own: collections.Counter = collections.Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(SAMPLE_S):
            # every thread: the backward compiles on the autograd engine's device thread
            frames = [f for t, f in sys._current_frames().items() if t != me]
            self.samples += 1
            for frame in frames:
                self._count(frame)

    def _count(self, frame: Any) -> None:
        seen = set()
        top = True
        while frame is not None:
            code = frame.f_code
            name = f"{os.path.basename(code.co_filename)}:{code.co_name}"
            if top:
                self.own[name] += 1
                top = False
            if name not in seen:
                seen.add(name)
                self.inclusive[name] += 1
            frame = frame.f_back

    def __enter__(self) -> Sampler:
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.elapsed = time.perf_counter() - self._t0

    def summary(self) -> dict:
        def secs(counter: collections.Counter) -> list:
            each = self.elapsed / max(1, self.samples)  # a sample stands for this much
            return [[k, round(v * each, 2)] for k, v in counter.most_common(SHOWN * 4)]

        return {
            "samples": self.samples,
            "inclusive_s": secs(self.inclusive),
            "self_s": secs(self.own),
        }


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
    from torch._dynamo.utils import compilation_time_metrics

    compilation_time_metrics.clear()
    sampler = Sampler()
    t0 = time.perf_counter()
    with sampler:
        compiled(x).float().square().mean().backward()
        torch.cuda.synchronize()
    access_memo.install = install  # type: ignore[assignment]
    row: dict = {"launch": launch, "memo": memo, "compile_s": round(time.perf_counter() - t0, 2)}
    if provider is not None:
        row.update(sites=provider.sites, failed=provider.failed)
    phases = {k: round(sum(v), 2) for k, v in compilation_time_metrics.items()}
    row["phases_s"] = dict(sorted(phases.items(), key=lambda kv: -kv[1]))
    if profile:
        row["sampled"] = sampler.summary()
    return row


def main() -> None:
    rows = [
        compile_once(None, "inline", True),
        compile_once(Served(), "inline", True, memo=True),
        compile_once(Served(), "op", True),
    ]
    if os.environ.get("PROBE_MEMO_OFF") == "1":  # the memo's own figure (BENCHMARKS.md)
        rows.append(compile_once(Served(), "inline", True, memo=False))
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "inline_compile.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    for r in rows:
        sampled = r.pop("sampled", None)
        print(json.dumps({k: v for k, v in r.items() if k != "phases_s"}))
        print("  phases (s):", list(r["phases_s"].items())[:12])
        if sampled:
            print(f"  sampled {sampled['samples']} stacks; inclusive (s):")
            for name, sec in sampled["inclusive_s"][: SHOWN * 2]:
                print(f"    {sec:7.2f}  {name}")
            print("  self (s):", sampled["self_s"][:12])


if __name__ == "__main__":
    main()
