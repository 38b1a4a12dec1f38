"""A self-contained search subject for the GPU search test (test_gpu_search.py): the search
(kernelpro_backend.search) on real, noisy timings.

A row-softmax Triton kernel with knobs (rows per program, num_warps, num_stages) stands in for
codegen; a small measurer validates each candidate against torch.softmax on fresh inputs
(outputs poisoned with NaN) and times it with runtime/timing.py's `time_kernel`, the one kernel
timer; the speed-of-light bound comes from the device's measured DRAM ceiling
(profilers/ceilings.py). Eager and torch.compile (Inductor) are the baselines.

Owns: the stand-in space, subgraph and measurer, and `search_softmax` (one search per shape).
Must not: time kernels its own way or assert anything (the test does).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from kernelpro_backend.profilers.ceilings import Ceilings
from kernelpro_backend.profilers.findings import Bottleneck, Finding, Severity
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.runtime.timing import time_kernel
from kernelpro_backend.search import Budget, SearchMemory, optimize


@triton.jit
def softmax_rows(X, Y, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for r in tl.static_range(ROWS):
        row = pid * ROWS + r
        if row < n_rows:
            x = tl.load(X + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
            x = x.to(tl.float32)
            e = tl.exp(x - tl.max(x, axis=0))
            y = e / tl.sum(e, axis=0)
            tl.store(Y + row * stride + cols, y.to(Y.dtype.element_ty), mask=cols < n_cols)


class Illegal(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Spec:
    template: str
    knobs: tuple[tuple[str, Any], ...]


VALUES = {
    "rows_per_program": (1, 2, 4, 8),
    "num_warps": (1, 2, 4, 8, 16, 32),
    "num_stages": (1, 2, 3),
}


class SoftmaxSpace:
    illegal = Illegal

    def initial(self, subgraph):
        return [
            Spec("softmax_rows", (("num_stages", 1), ("num_warps", 4), ("rows_per_program", 1)))
        ]

    def knob_space(self, c):
        return dict(VALUES)

    def knobs(self, c):
        return dict(c.knobs)

    def knob_roles(self, c):
        return {"rows_per_program": "rows", "num_warps": "warps", "num_stages": "stages"}

    def with_knobs(self, c, **changes):
        for k, v in changes.items():
            if v not in VALUES.get(k, ()):
                raise Illegal(f"{k}={v!r} not in {VALUES.get(k)}")
        return Spec(c.template, tuple(sorted({**dict(c.knobs), **changes}.items())))

    def describe(self, c):
        return {"template": c.template, "knobs": dict(c.knobs)}


@dataclasses.dataclass(frozen=True)
class Key:
    digest: str


@dataclasses.dataclass(frozen=True)
class SoftmaxSubgraph:
    rows: int
    cols: int
    dtype: torch.dtype
    kind: str = "reduction"
    pattern: str = "softmax"
    precision: str = "ieee"

    @property
    def key(self):
        return Key(f"softmax-{self.rows}x{self.cols}-{str(self.dtype).split('.')[-1]}")

    def make_input(self, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        return torch.randn(self.rows, self.cols, device="cuda", dtype=self.dtype, generator=g) * 3


def timed(fn, sol_ms):
    timing = time_kernel(fn, [()], torch.device("cuda"))
    return EvalResult(
        EvalStatus.OK,
        median_ms=timing.median_ms,
        spread_ms=timing.spread_ms,
        times_ms=timing.times_ms,
        sol_ms=sol_ms,
        sol_fraction=min(1.0, sol_ms / timing.median_ms),
        findings=(
            Finding(
                "roofline",
                "bottleneck",
                Bottleneck.MEMORY.value,
                None,
                Severity.HIGH,
                "softmax moves 2 bytes per byte of input; widen loads, more rows per program",
            ),
        ),
    )


class SoftmaxMeasurer:
    def __init__(self, bandwidth_gbs):
        self.bandwidth = bandwidth_gbs
        self.seed = 0

    def sol_ms(self, sg):
        return 2 * sg.rows * sg.cols * torch.finfo(sg.dtype).bits / 8 / (self.bandwidth * 1e6)

    def baselines(self, sg):
        x = sg.make_input(1)
        compiled = torch.compile(lambda t: torch.softmax(t, dim=-1))
        compiled(x)
        return {
            "eager": timed(lambda: torch.softmax(x, dim=-1), self.sol_ms(sg)),
            "inductor": timed(lambda: compiled(x), self.sol_ms(sg)),
        }

    def measure(self, sg, candidates):
        return [self._one(sg, c) for c in candidates]

    def _one(self, sg, c):
        k = dict(c.knobs)
        self.seed += 1
        x = sg.make_input(100 + self.seed)
        y = torch.full_like(x, float("nan"))
        block = triton.next_power_of_2(sg.cols)
        grid = (triton.cdiv(sg.rows, k["rows_per_program"]),)

        def run():
            softmax_rows[grid](
                x,
                y,
                sg.rows,
                sg.cols,
                x.stride(0),
                ROWS=k["rows_per_program"],
                BLOCK=block,
                num_warps=k["num_warps"],
                num_stages=k["num_stages"],
            )

        try:
            run()
            torch.cuda.synchronize()
        except Exception as e:  # compile errors and out-of-resources are values for the search
            return EvalResult(EvalStatus.COMPILE_ERROR, message=f"{type(e).__name__}: {e}"[:300])
        tol = {torch.float32: (1e-5, 1e-6), torch.bfloat16: (1e-2, 1e-3)}[sg.dtype]
        if not torch.allclose(y.float(), torch.softmax(x.float(), -1), rtol=tol[0], atol=tol[1]):
            return EvalResult(EvalStatus.WRONG, message="differs from torch.softmax")
        result = timed(run, self.sol_ms(sg))
        if result.median_ms < 0.9 * self.sol_ms(sg):
            return EvalResult(EvalStatus.SUSPICIOUS, message="faster than speed of light")
        return result


SHAPES = ((4096, 1024, torch.float32), (8192, 4096, torch.float32), (4096, 8192, torch.bfloat16))


def search_softmax(
    out: Path, shapes=SHAPES, max_trials: int = 40, max_seconds: float = 60.0
) -> list[dict[str, Any]]:
    """One search per (rows, cols, dtype); logs, memory and outcomes.json go under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    bw = Ceilings.load_or_measure("cuda").dram_bytes_per_s / 1e9
    measurer = SoftmaxMeasurer(bw)
    memory = SearchMemory(out / "search_memory.jsonl")
    rows = []
    for r, c, dt in shapes:
        sg = SoftmaxSubgraph(r, c, dt)
        t0 = time.monotonic()
        res = optimize(
            sg,
            space=SoftmaxSpace(),
            measurer=measurer,
            memory=memory,
            budget=Budget(max_trials=max_trials, max_seconds=max_seconds),
            log_path=str(out / f"search_{sg.key.digest}.jsonl"),
            progress=True,
        )
        best = res.best_result
        rows.append(
            {
                "subgraph": sg.key.digest,
                "eager_ms": res.baselines["eager"].median_ms,
                "inductor_ms": res.baselines["inductor"].median_ms,
                "best_kernel_ms": best.median_ms if best else None,
                "best_kernel_spread_ms": best.spread_ms if best else None,
                "best_sol_fraction": best.sol_fraction if best else None,
                "winner": res.winner
                if res.uses_fallback
                else {"node": res.winner_id, **dict(res.winner.knobs)},
                "trials": res.trials,
                "trials_saved": res.trials_saved,
                "reason": res.stop_reason,
                "tree": res.tree,
                "wall_s": time.monotonic() - t0,
            }
        )
    (out / "outcomes.json").write_text(
        json.dumps({"dram_bandwidth_gbs": bw, "rows": rows}, indent=1, default=str)
    )
    return rows
