"""GPU check of free-form CUDA C++ candidates (runtime/cuda_*.py): run from the repo root.

    OUT=/tmp/out python scripts/gpu_cuda_candidates.py

Through a WorkerPool (2 workers, 20 s job timeout): a vector add and a row softmax evaluate ok
(timed next to eager); a source that does not compile and a header whose argument types do not
match the kernel come back compile_error; an out-of-bounds write comes back crashed and an
endless loop timed_out, each followed by a vector add that evaluates ok. In this process: the
driver-API launch under CUDA-graph capture, >48 KiB dynamic shared memory, NVRTC (where
libnvrtc is installed). In a child process with no nvcc on PATH and no CUDA_HOME: a cache entry
holding a cubin decodes, loads and matches torch.softmax.
Writes $OUT/gpu_cuda_candidates.json; prints a table last. About 1-2 minutes on an H100.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.pop("TRITON_INTERPRET", None)
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "runtime")]
OUT = Path(os.environ.get("OUT", "."))
os.environ.setdefault("KERNELPRO_CUBIN_DIR", str(OUT / "cubins"))  # workers inherit it

import torch  # noqa: E402
from cuda_sources import (  # noqa: E402
    BIG_SMEM_ADD,
    CUTE_SCALE,
    DOES_NOT_COMPILE,
    ENDLESS_LOOP,
    OUT_OF_BOUNDS_WRITE,
    ROW_SOFTMAX,
    VECTOR_ADD,
    WRONG_ARG_TYPE,
)

from kernelpro_backend.backend import make_backend  # noqa: E402
from kernelpro_backend.profilers.ceilings import Ceilings  # noqa: E402
from kernelpro_backend.runtime import BaselineCandidate, Job, SourceCandidate, WorkerPool  # noqa: E402

CHILD = """
import json, sys, torch
from kernelpro_backend.autotune import load_artifact
from kernelpro_backend.cache.artifact import decode_entry
from kernelpro_backend.runtime.cuda_compile import find_nvcc, nvrtc_version
entry = decode_entry(open(sys.argv[1], "rb").read())
kernel = load_artifact(entry.artifact)
x = torch.randn(512, 1000, device="cuda")
err = (kernel(x)[0] - torch.softmax(x, -1)).abs().max().item()
print(json.dumps({"nvcc": find_nvcc(), "max_abs_err": err, "name": kernel.name}))
"""


def subgraph(fn, *shapes):
    store: list = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch._dynamo.reset()
    args = [torch.randn(*s, device="cuda") for s in shapes]
    torch.compile(fn, backend=backend, options={"fallback": "eager", "search": "off"})(*args)
    (sg,) = store
    return sg


def pool_checks(rows: list, report: dict, ceilings: Ceilings) -> None:
    add = subgraph(lambda x, y: x + y, (4096, 4097), (4096, 4097))
    softmax = subgraph(lambda x: torch.softmax(x, -1), (4096, 1000))

    def job(sg, source, entry):
        return Job.from_subgraph(sg, SourceCandidate("cuda", source, entry), ceilings=ceilings)

    good_add = job(add, VECTOR_ADD, "vector_add")
    good_softmax = job(softmax, ROW_SOFTMAX, "row_softmax")
    eager = BaselineCandidate("eager")
    with WorkerPool(workers=2, timeout_s=20) as pool:
        batches = {
            "vector_add": ([good_add, good_add.with_candidate(eager)], "ok"),
            "row_softmax": ([good_softmax, good_softmax.with_candidate(eager)], "ok"),
            "does_not_compile": ([job(add, DOES_NOT_COMPILE, "vector_add")], "compile_error"),
            "wrong_arg_type": ([job(add, WRONG_ARG_TYPE, "vector_add")], "compile_error"),
            "out_of_bounds_write": ([job(add, OUT_OF_BOUNDS_WRITE, "oob"), good_add], "crashed"),
            "endless_loop": ([job(add, ENDLESS_LOOP, "spin"), good_add], "timed_out"),
        }
        for name, (jobs, expected) in batches.items():
            start = time.time()
            first, *rest = pool.evaluate_many(jobs)
            torch.cuda.synchronize()  # the parent's context is unharmed
            after_ok = all(r.ok for r in rest)
            passed = first.status.value == expected and after_ok
            report[name] = {
                "passed": passed,
                "seconds": time.time() - start,
                "result": first.to_dict(),
                "after": [r.to_dict() for r in rest],
            }
            if first.ok:
                base = rest[0].median_ms if rest and rest[0].ok else None
                note = f"{first.median_ms * 1e3:.1f} us, SOL {first.sol_fraction or 0:.0%}"
                note += f", eager {base * 1e3:.1f} us" if base else ""
            else:
                note = first.message[:70] + ("; next ok" if rest and after_ok else "")
            rows.append((name, first.status.value, "" if passed else "FAILED: " + note, note))
        report["workers_replaced"] = pool.replaced


def in_process_checks(rows: list, report: dict) -> None:
    from kernelpro_backend.runtime.cuda_compile import (
        compile_cuda,
        cutlass_include_dirs,
        nvrtc_version,
    )
    from kernelpro_backend.runtime.cuda_driver import CudaKernel, current_arch, load_cuda_source
    from kernelpro_backend.runtime.cuda_source import parse_launch

    def record(name: str, fn: Any) -> None:
        start = time.time()
        try:
            note = fn()
            passed = True
        except Exception as e:  # a failed check is a row, the others still run
            note, passed = f"{type(e).__name__}: {e}"[:200], False
        report[name] = {"passed": passed, "note": note, "seconds": time.time() - start}
        rows.append((name, "ok" if passed else "error", "" if passed else "FAILED", note[:70]))

    def graph_capture() -> str:
        kernel = load_cuda_source(VECTOR_ADD, "vector_add")
        x, y = (torch.randn(3, 1001, device="cuda") for _ in range(2))
        graph = torch.cuda.CUDAGraph()
        kernel(x, y)
        with torch.cuda.graph(graph):
            (out,) = kernel(x, y)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)
        return "replayed graph matches x + y"

    def big_smem() -> str:
        x, y = (torch.randn(70_001, device="cuda") for _ in range(2))
        (out,) = load_cuda_source(BIG_SMEM_ADD, "big_smem_add")(x, y)
        torch.testing.assert_close(out, x + y, rtol=0, atol=0)
        return "100 KiB dynamic smem launched"

    def nvrtc() -> str:
        if nvrtc_version() is None:
            return "skipped: libnvrtc not installed"
        cubin = compile_cuda(ROW_SOFTMAX, current_arch(), compiler="nvrtc", use_cache=False)
        x = torch.randn(33, 777, device="cuda")
        (out,) = CudaKernel(cubin.data, parse_launch(ROW_SOFTMAX, "row_softmax"))(x)
        torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
        return f"{cubin.compiler} cubin matches torch.softmax"

    def cute() -> str:
        if not cutlass_include_dirs():
            return "skipped: CUTLASS headers absent (install the nvidia-cutlass wheel)"
        x = torch.randn(1000, device="cuda")
        (out,) = load_cuda_source(CUTE_SCALE, "cute_scale")(x)
        torch.testing.assert_close(out, 2 * x, rtol=0, atol=0)
        return f"CuTe kernel built with {cutlass_include_dirs()[0]}"

    record("cuda_graph_capture", graph_capture)
    record("cute_kernel", cute)
    record("smem_over_48k", big_smem)
    record("nvrtc_compile", nvrtc)
    record("cached_cubin_without_nvcc", cached_cubin_without_nvcc)


def cached_cubin_without_nvcc() -> str:
    from kernelpro_backend.autotune import winner_fields
    from kernelpro_backend.cache import KernelArtifact, cache_key
    from kernelpro_backend.cache.artifact import encode_entry

    sg = subgraph(lambda x: torch.softmax(x, -1), (512, 1000))
    fields = winner_fields(SourceCandidate("cuda", ROW_SOFTMAX, "row_softmax"), render=None)
    entry = OUT / "softmax_entry.json"
    entry.write_bytes(encode_entry(cache_key(sg.key), KernelArtifact(**fields, kernel_ms=0.01)))
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    paths = os.environ.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in paths if not (Path(p) / "nvcc").exists())
    # Keep the caller's PYTHONPATH (the GPU image gets diskcache from there), the repo first.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(entry)], env=env, capture_output=True, text=True
    )
    if child.returncode != 0:
        raise RuntimeError(child.stderr.strip().splitlines()[-1] if child.stderr else "failed")
    got = json.loads(child.stdout.strip().splitlines()[-1])
    if got["nvcc"] is not None or got["max_abs_err"] > 1e-5:
        raise AssertionError(f"child saw nvcc={got['nvcc']}, max error {got['max_abs_err']:.3g}")
    return f"child without nvcc: max abs err {got['max_abs_err']:.2g} ({len(fields['binary'])} B)"


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_cuda_candidates: needs a CUDA GPU")
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    rows: list[tuple[str, str, str, str]] = []
    ceilings = Ceilings.load_or_measure("cuda", cache_dir=OUT / "cache")
    pool_checks(rows, report, ceilings)
    in_process_checks(rows, report)
    report["seconds"] = time.time() - t0
    (OUT / "gpu_cuda_candidates.json").write_text(json.dumps(report, indent=1, default=str))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'check':<{width}}  {'status':<14}  {'verdict':<7}  note")
    for name, status, failed, note in rows:
        print(f"{name:<{width}}  {status:<14}  {'FAIL' if failed else 'pass':<7}  {note}")
    print(f"total {report['seconds']:.0f} s; JSON in {OUT / 'gpu_cuda_candidates.json'}")
    return 1 if any(r[2] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
