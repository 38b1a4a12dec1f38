"""GPU check of the evaluator (kernelpro_backend/runtime): run from the repo root on an H100.

    OUT=/tmp/out python scripts/gpu_evaluate.py

1. measures the device ceilings (printed next to the H100 SXM datasheet) and caches them;
2. runs the gaming corpus (tests/runtime/gaming_corpus.py) on CUDA through a WorkerPool;
3. the isolation checks: an out-of-bounds write and an endless kernel each come back
   crashed / timed_out while the parent and the other worker keep serving;
4. times the honest kernel twice (median and spread of each), plus eager and Inductor.
Writes $OUT/gpu_evaluate.json; prints a short table last. About 2-3 minutes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "runtime")]

import torch  # noqa: E402
from gaming_corpus import CASES, CUDA_CRASHES, HONEST  # noqa: E402

from kernelpro_backend.backend import make_backend  # noqa: E402
from kernelpro_backend.profilers.ceilings import DATASHEET_H100_SXM, Ceilings  # noqa: E402
from kernelpro_backend.runtime import Job, SourceCandidate, WorkerPool, faster  # noqa: E402


def pointwise_subgraph(rows: int, cols: int):
    store: list = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch._dynamo.reset()
    x, y = (torch.randn(rows, cols, device="cuda") for _ in range(2))
    fn = torch.compile(
        lambda x, y: torch.relu(x * y + 1.0),
        backend=backend,
        options={"fallback": "eager", "search": "off"},
    )
    fn(x, y)
    (sg,) = store
    return sg


def main() -> int:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    rows: list[tuple[str, str, str]] = []
    t0 = time.time()

    cache = out_dir / "cache"
    ceilings = Ceilings.load_or_measure("cuda", cache_dir=cache)
    report["ceilings"] = ceilings.to_dict()
    for field, sheet in DATASHEET_H100_SXM.items():
        got = getattr(ceilings, field)
        rows.append(
            (
                f"ceiling {field}",
                f"{got / 1e12:.3g} T",
                f"datasheet {sheet / 1e12:.3g} T ({got / sheet:.0%})",
            )
        )

    big = pointwise_subgraph(4096, 4096)  # 192 MiB moved: event timing with L2 flush
    small = pointwise_subgraph(64, 256)  # launch-bound: CUDA-graph replay

    def job(sg, text, energy=False):
        candidate = SourceCandidate("triton", text, "entry")
        return Job.from_subgraph(sg, candidate, ceilings=ceilings, measure_energy=energy)

    with WorkerPool(workers=2, timeout_s=40) as pool:
        corpus = pool.evaluate_many([job(big, c.source) for c in CASES])
        report["corpus"] = {}
        for case, result in zip(CASES, corpus, strict=True):
            passed = result.status.value == case.status and case.rejected_for_reason(result.message)
            report["corpus"][case.name] = {
                "expected": case.status,
                "passed": passed,
                **result.to_dict(),
            }
            rows.append(
                (
                    f"gaming {case.name}",
                    result.status.value,
                    "rejected" if passed else f"NOT REJECTED: {result.message[:80]}",
                )
            )

        report["isolation"] = {}
        for name, (text, status) in CUDA_CRASHES.items():
            start = time.time()
            bad, good, after = pool.evaluate_many(
                [job(big, text), job(big, HONEST), job(big, HONEST)]
            )
            torch.cuda.synchronize()  # the parent's context is unharmed
            passed = bad.status.value == status and good.ok and after.ok
            report["isolation"][name] = {
                "passed": passed,
                "seconds": time.time() - start,
                "bad": bad.to_dict(),
                "good": good.ok,
                "next": after.ok,
            }
            rows.append(
                (
                    f"isolation {name}",
                    bad.status.value,
                    "ok, pool healthy"
                    if passed
                    else f"FAILED: {bad.message[:60]} / {good.message[:60]}",
                )
            )

        for label, sg in (("4096x4096", big), ("64x256", small)):
            first, second, eager, inductor = pool.evaluate_many(
                [job(sg, HONEST, energy=True), job(sg, HONEST), *job(sg, HONEST).baselines()]
            )
            agree = faster(first, second) is None
            report[f"timing_{label}"] = {
                r: x.to_dict()
                for r, x in (
                    ("first", first),
                    ("second", second),
                    ("eager", eager),
                    ("inductor", inductor),
                )
            }
            for name, r in (
                ("1st", first),
                ("2nd", second),
                ("eager", eager),
                ("inductor", inductor),
            ):
                if r.ok:
                    rows.append(
                        (
                            f"time {label} {name}",
                            f"{r.median_ms * 1e3:.2f} us +- {r.spread_ms * 1e3:.2f}",
                            f"{r.details.get('timing_method')} SOL {r.sol_fraction or 0:.0%}"
                            + (f" {r.energy_j * 1e3:.3g} mJ/call" if r.energy_j else ""),
                        )
                    )
                else:
                    rows.append((f"time {label} {name}", r.status.value, r.message[:80]))
            rows.append(
                (f"time {label} twice", "tie" if agree else "DISAGREE", "same kernel within spread")
            )
        report["workers_replaced"] = pool.replaced

    report["seconds"] = time.time() - t0
    (out_dir / "gpu_evaluate.json").write_text(json.dumps(report, indent=1, default=str))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'check':<{width}}  {'result':<24}  note")
    for name, result, note in rows:
        print(f"{name:<{width}}  {result:<24}  {note}")
    print(f"total {report['seconds']:.0f} s; JSON in {out_dir / 'gpu_evaluate.json'}")
    failed = [r for r in rows if "NOT" in r[2] or "FAILED" in r[2] or r[1] == "DISAGREE"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
