"""GPU probe: the speed-of-light bound of a subgraph that returns a view of its input.

BERT's MLM head (bf16, batch 32 x 512 tokens, vocabulary 30522) on an H100: the LM-head addmm
split from its epilogue leaves a pointwise subgraph returning `logits = addmm.view(B, T, V)`
beside `logits.view(-1, V).float()`. Its bound counted the view as written (4.0 GB, 1.336 ms)
and the warm-up printed "SUSPICIOUS pointwise-5fb09b9425ac: measured 1.018 ms"; the bound now
leaves it out (3.0 GB). This probe builds that subgraph at the real shapes (the GEMM's group
split below the mm, as the lowering splits it), evaluates eager, Inductor and kernelpro's seed
kernel in-process exactly as a worker does (validation, timing, the SOL_MARGIN check against
the new bound), and says what each verdict would have been against the old bound.

Since 01c6f65 subgraphs leave such a view outside (fx_passes/subgraph.py `_outside_views`): the
part then returns the float32 copy alone, and its old and new bounds agree. KP_KEEP_VIEW=1
builds the part as it was (the view returned), for the bound comparison above.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-sol-view-outputs/probe.py
    KP_KEEP_VIEW=1 OUT=/tmp/out python docs/gpu_runs/2026-12-06-sol-view-outputs/probe.py

Writes $OUT/sol_view_outputs.json; prints a table last. About 1-2 minutes on one H100.
KP_DEVICE=cpu KP_TOKENS=2x64: a dry run of the probe itself on the CPU (datasheet ceilings).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

OUT = Path(os.environ.get("OUT", "out"))
DEVICE = os.environ.get("KP_DEVICE", "cuda")
B, T = (int(x) for x in os.environ.get("KP_TOKENS", "32x512").split("x"))
D, V = 768, 30522


def _logits_then_float(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = (a @ b).view(B, T, V)
    return logits, logits.view(-1, V).float()


def pointwise_part() -> Any:
    """The pointwise subgraph: found as is, or the GEMM's group split below its mm."""
    from kernelpro_backend.backend import make_backend
    from kernelpro_backend.fx_passes import subgraph
    from kernelpro_backend.fx_passes.ops import op_name
    from kernelpro_backend.fx_passes.split import split_at

    if os.environ.get("KP_KEEP_VIEW") == "1":
        subgraph._outside_views = lambda nodes: set()  # the part as it was before 01c6f65

    store: list[Any] = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    a = torch.randn(B * T, D, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(D, V, device=DEVICE, dtype=torch.bfloat16)
    compiled = torch.compile(
        _logits_then_float, backend=backend, options={"fallback": "eager", "search": "off"}
    )
    compiled(a, b)
    del a, b
    found = [s for s in store if s.kind == "pointwise"]
    if found:
        return found[0], "found as a pointwise subgraph"
    whole = next(s for s in store if s.kind == "gemm")
    mm = next(n for n in whole.nodes if op_name(n) == "aten::mm")
    return split_at(whole, mm)[1], "split from the GEMM's group below the mm"


def main() -> None:
    from kernelpro_backend.lowering import lower
    from kernelpro_backend.profilers.ceilings import DATASHEET_H100_SXM, Ceilings
    from kernelpro_backend.profilers.speed_of_light import SOL_MARGIN, SpeedOfLight, fewest_bytes
    from kernelpro_backend.runtime.candidate import BaselineCandidate
    from kernelpro_backend.runtime.job import Job
    from kernelpro_backend.runtime.worker import WorkerState, evaluate_job

    OUT.mkdir(parents=True, exist_ok=True)
    part, how = pointwise_part()
    if DEVICE == "cuda":
        ceilings = Ceilings.load_or_measure("cuda", tempfile.mkdtemp())
    else:
        ceilings = Ceilings("datasheet", **DATASHEET_H100_SXM, l2_bytes=50 * 2**20)
    work = SpeedOfLight.work(part)
    old_bytes = fewest_bytes(part.input_meta, part.output_meta)
    new_ms = SpeedOfLight.time_ms(work, ceilings, part.precision)
    old_ms = old_bytes / ceilings.dram_bytes_per_s * 1e3
    seed = Job.from_subgraph(part, lower(part), ceilings=ceilings)
    state = WorkerState(Path(tempfile.mkdtemp()))
    rows: dict[str, Any] = {}
    for job in (*seed.baselines(), seed):
        name = job.candidate.name if isinstance(job.candidate, BaselineCandidate) else "seed"
        r = evaluate_job(job, state)
        ms, spread = (
            r.details.get("measured_median_ms", r.median_ms),
            r.details.get("measured_spread_ms", r.spread_ms),
        )
        old = None if ms is None else ms + (spread or 0.0) < SOL_MARGIN * old_ms
        rows[name] = {
            "status": r.status.value,
            "median_ms": ms,
            "spread_ms": spread,
            "suspicious_under_old_bound": old,
            "message": r.message,
        }
    result = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE,
        "torch": torch.__version__,
        "subgraph": how,
        "key": part.key.short(),
        "text": part.text,
        "dram_bytes_per_s": ceilings.dram_bytes_per_s,
        "old_bytes": old_bytes,
        "new_bytes": work.bytes,
        "old_sol_ms": old_ms,
        "new_sol_ms": new_ms,
        "rows": rows,
    }
    (OUT / "sol_view_outputs.json").write_text(json.dumps(result, indent=1))
    print(f"{how}; key {part.key.short()}; DRAM {ceilings.dram_bytes_per_s / 1e12:.3f} TB/s")
    print(f"bound: old {old_bytes / 1e9:.3f} GB {old_ms:.3f} ms, new {work.bytes / 1e9:.3f} GB "
          f"{new_ms:.3f} ms")  # fmt: skip
    print(f"{'candidate':<16} {'status':<11} {'ms':>8} {'spread':>7}  suspicious-under-old")
    for name, row in rows.items():
        ms = "-" if row["median_ms"] is None else f"{row['median_ms']:.3f}"
        sp = "-" if row["spread_ms"] is None else f"{row['spread_ms']:.3f}"
        print(
            f"{name:<16} {row['status']:<11} {ms:>8} {sp:>7}  {row['suspicious_under_old_bound']}"
        )


if __name__ == "__main__":
    main()
