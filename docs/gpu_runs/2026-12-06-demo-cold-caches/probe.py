"""Does the demo's cold-cache set-up hold on a GPU? Inductor then kernelpro (cache-only, an empty
kernel cache) compile the demo's transformer block, each under bench/demo.py's
`cold_compile_caches`, after the same untimed warm-up compile: kernelpro's compile must hit none
of Inductor's FX-graph cache entries and write Triton kernels into its own directory; the first
steps' seconds are what the demo prints.

    python docs/gpu_runs/2026-12-06-demo-cold-caches/probe.py    # writes $OUT/demo_cold_caches.json
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters

from kernelpro_backend import examples
from kernelpro_backend.backend import kernelpro
from kernelpro_backend.bench.demo import _step_fn, _warm_process, cold_compile_caches


def _files(directory: Path) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file())


def main() -> None:
    out = Path(os.environ.get("OUT", "."))
    kernel_cache = tempfile.mkdtemp(prefix="kp-probe-cache-")
    modes = {
        "inductor": lambda m: torch.compile(m),
        "kernelpro": lambda m: torch.compile(
            m, backend=kernelpro, options={"search": "cache-only", "cache_dir": kernel_cache}
        ),
    }
    rows = []
    torch._dynamo.reset()
    with cold_compile_caches() as fresh:
        fresh("warm-up")
        _warm_process("cuda")
        for name, wrap in modes.items():
            directory = fresh(name)
            counters.clear()
            model, (x,) = examples.transformer_block("cuda", batch=8, seq=512)
            step = _step_fn(model, wrap(model), x)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            rows.append(
                {
                    "mode": name,
                    "first_step_s": round(time.perf_counter() - t0, 2),
                    "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"],
                    "fxgraph_cache_miss": counters["inductor"]["fxgraph_cache_miss"],
                    "files_in_its_cache": _files(directory),
                    "triton_files": _files(directory / "triton"),
                }
            )
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo_cold_caches.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'mode':<10} {'first s':>8} {'fx hit':>7} {'fx miss':>8} {'files':>6} {'triton':>7}")
    for r in rows:
        print(
            f"{r['mode']:<10} {r['first_step_s']:>8} {r['fxgraph_cache_hit']:>7} "
            f"{r['fxgraph_cache_miss']:>8} {r['files_in_its_cache']:>6} {r['triton_files']:>7}"
        )


if __name__ == "__main__":
    main()
