"""Cross-check for the row template's RMSNorm forward bf16 4096x65536 at 8192 columns and 32
warps: 0.447 ms in the row sweep against 0.368 ms for the hand-written kernel of
gpu_eviction_probe.py with the same PTX loads (BENCHMARKS.md, rows, "Re-read rows"). Times the
template's kernel through build_kernel and as a raw launch into a preallocated output, and the
probe's kernel, each with the sweep's timer (runtime/timing: CUDA graph replays) and with
triton's do_bench, on the sweep's own inputs.

    PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-rms-norm-eviction-probe/gpu_timing_crosscheck.py
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from triton.testing import do_bench

from kernelpro_backend.bench.row_sweep import _time, row_subgraph
from kernelpro_backend.codegen import render
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel

ROWS, COLS = 4096, 65536


def _namespace(source: str, name: str) -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(compile(source, name, "exec"), ns)  # our own generated / probe source
    return ns


def main() -> None:
    sg = row_subgraph("rms_norm", ROWS, COLS, torch.bfloat16, False)
    seed = lower(sg)
    print("seed knobs", seed.knobs)
    inputs = sg.make_inputs(0)
    print([(tuple(t.shape), t.stride(), t.dtype, t.data_ptr() % 256) for t in inputs])
    wide = seed.with_knobs(BLOCK_C=8192, num_warps=32)
    runs: dict[str, Callable[[], object]] = {}
    specs = {"template seed": seed}
    if wide != seed:  # the seed's default is this since 90aae83: timed once
        specs["template b8192 w32"] = wide
    for name, spec in specs.items():
        kernel = build_kernel(spec)
        runs[name] = lambda kernel=kernel: kernel(*inputs)
    x = next(t for t in inputs if t.dim() == 2)
    w = next(t for t in inputs if t.dim() == 1)
    out = torch.empty_like(x)
    probe = _namespace(
        Path("docs/gpu_runs/2026-11-26-rms-norm-eviction-probe/gpu_eviction_probe.py").read_text(),
        "probe",
    )["two_pass"]
    hints = ("evict_last", "evict_first", "evict_last")
    runs["probe two_pass b8192 w32"] = lambda: probe[(ROWS,)](
        x, w, out, COLS, 8192, *hints, num_warps=32, num_stages=1
    )
    raw = _namespace(render(wide).source, "template")["kernel"]
    runs["template raw launch, preallocated out"] = lambda: raw[(ROWS,)](
        *inputs, out, ROWS=1, BLOCK_C=8192, num_warps=32, num_stages=1
    )
    for name, fn in runs.items():
        print(f"{name:44s} sweep timer {_time(fn):.4f}  do_bench {do_bench(fn, rep=200):.4f}")


if __name__ == "__main__":
    main()
