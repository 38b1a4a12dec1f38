"""GPU check of the search (kernelpro_backend.search) on real, noisy timings.

Self-contained: a row-softmax Triton kernel with knobs (rows per program, num_warps,
num_stages) stands in for codegen; a small measurer validates each candidate against
torch.softmax on fresh inputs (outputs poisoned with NaN), times it with
triton.testing.do_bench (median, spread = (p80 - p20) / 2), and reports the speed-of-light
fraction against a measured copy bandwidth. Eager and torch.compile (Inductor) are the
baselines. Writes outcomes.json, search logs and the search memory under $OUT; prints a table.

Run from the repository root:  OUT=/tmp/out python scripts/gpu_search.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernelpro_backend.profilers.findings import Bottleneck, Finding, Severity  # noqa: E402
from kernelpro_backend.runtime.result import EvalResult, EvalStatus  # noqa: E402
from kernelpro_backend.search import Budget, SearchMemory, optimize  # noqa: E402


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
    p20, p50, p80 = triton.testing.do_bench(fn, warmup=10, rep=40, quantiles=[0.2, 0.5, 0.8])
    return EvalResult(
        EvalStatus.OK,
        median_ms=p50,
        spread_ms=(p80 - p20) / 2,
        times_ms=(p20, p50, p80),
        sol_ms=sol_ms,
        sol_fraction=min(1.0, sol_ms / p50),
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


def copy_bandwidth_gbs():
    a = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=10, rep=50)
    return 2 * a.numel() / (ms * 1e6)


def main(quick: bool = False) -> list[dict[str, Any]]:
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    bw = copy_bandwidth_gbs()
    measurer = SoftmaxMeasurer(bw)
    memory = SearchMemory(out / "search_memory.jsonl")
    shapes = [
        (4096, 1024, torch.float32),
        (8192, 4096, torch.float32),
        (4096, 8192, torch.bfloat16),
    ]
    if quick:
        shapes = shapes[:1]
    rows = []
    for r, c, dt in shapes:
        sg = SoftmaxSubgraph(r, c, dt)
        t0 = time.monotonic()
        res = optimize(
            sg,
            space=SoftmaxSpace(),
            measurer=measurer,
            memory=memory,
            budget=Budget(max_trials=12 if quick else 40, max_seconds=60.0),
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
        json.dumps({"copy_bandwidth_gbs": bw, "rows": rows}, indent=1, default=str)
    )
    print(f"\ncopy bandwidth {bw:.0f} GB/s; memory records {len(memory)}")
    print(
        f"{'subgraph':32} {'eager':>8} {'inductor':>8} {'kernel':>8} {'%SOL':>5} {'trials':>6} {'saved':>5} {'reason':>10}  winner"
    )
    for row in rows:
        kernel = row["best_kernel_ms"]
        sol = row["best_sol_fraction"]
        print(
            f"{row['subgraph']:32} {row['eager_ms']:8.4f} {row['inductor_ms']:8.4f} "
            f"{kernel if kernel is not None else float('nan'):8.4f} {100 * (sol or 0):5.0f} "
            f"{row['trials']:6d} {row['trials_saved']:5d} {row['reason']:>10}  {row['winner']}"
        )
    return rows


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("gpu_search.py needs a CUDA GPU (run it on the device machine)")
    main(quick="--quick" in sys.argv)
