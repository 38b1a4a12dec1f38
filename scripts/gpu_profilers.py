"""Run the profiling tools live on one good and three deliberately flawed Triton kernels, and
capture their raw outputs as test fixtures.

    OUT=/tmp/out python scripts/gpu_profilers.py            # on the H100 (ncu, torch.cuda)
    python scripts/gpu_profilers.py --cpu-fixtures DIR      # no GPU: real SASS + ptxas -v only
    python scripts/gpu_profilers.py --launch CASE           # the child that ncu profiles

Kernels: `good_add` (coalesced, 16-byte loads, a full grid), `strided_copy` (each thread reads
32 floats apart: uncoalesced), `spill` (BLOCK=16384 with num_warps=1: 512 live floats per
thread, registers spill), `tiny_grid` (4 programs on 132 SMs). The tools must name each flaw
and propose the knob that fixes it; the good kernel must get no high-severity finding.
Writes fixtures flat into $KP_FIXTURES_DIR (default $OUT/fixtures) plus $OUT/fixtures.tar.gz,
results to $OUT/profilers_results.json, and prints a table last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def good_add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def strided_copy_kernel(x, out, n, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs * STRIDE, mask=mask), mask=mask)


@triton.jit
def spill_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask, other=0.0)
    total = tl.sum(v * v, axis=0)  # v stays live across the reduction: BLOCK/32 floats a thread
    tl.store(out + offs, v / total, mask=mask)


@triton.jit
def tiny_grid_kernel(x, y, out, n, BLOCK: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr):
    base = tl.program_id(0) * BLOCK * ROWS_PER_PROGRAM
    for r in range(ROWS_PER_PROGRAM):
        offs = base + r * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    kernel: object
    n: int
    knobs: dict
    signature: dict  # for triton.compile on CPU
    flaw: tuple[str, str, str] | None  # (tool, metric, knob the suggestion must name)

    def inputs(self, device: str = "cuda"):
        import torch

        g = torch.Generator(device="cpu").manual_seed(0)
        stride = self.knobs.get("STRIDE", 1)
        x = torch.randn(self.n * stride, generator=g).to(device)
        y = torch.randn(self.n, generator=g).to(device)
        return x, y, torch.empty(self.n, device=device)

    def launch(self, x, y, out):
        k = self.knobs
        warps, block = k["num_warps"], k["BLOCK"]
        if self.name == "good_add":
            return good_add_kernel[(triton.cdiv(self.n, block),)](
                x, y, out, self.n, BLOCK=block, num_warps=warps
            )
        if self.name == "strided_copy":
            grid = (triton.cdiv(self.n, block),)
            return strided_copy_kernel[grid](
                x, out, self.n, STRIDE=k["STRIDE"], BLOCK=block, num_warps=warps
            )
        if self.name == "spill":
            return spill_kernel[(triton.cdiv(self.n, block),)](
                x, out, self.n, BLOCK=block, num_warps=warps
            )
        rows = k["rows_per_program"]
        grid = (triton.cdiv(self.n, block * rows),)
        return tiny_grid_kernel[grid](
            x, y, out, self.n, BLOCK=block, ROWS_PER_PROGRAM=rows, num_warps=warps
        )

    @property
    def grid(self) -> int:
        return -(-self.n // (self.knobs["BLOCK"] * self.knobs.get("rows_per_program", 1)))

    @property
    def bytes(self) -> float:  # external reads + writes, float32
        reads = 1 if self.name in ("strided_copy", "spill") else 2
        return 4.0 * self.n * (reads + 1)

    @property
    def flops(self) -> float:
        return {"good_add": 1, "strided_copy": 0, "spill": 3, "tiny_grid": 1}[self.name] * float(
            self.n
        )


P3, P1 = (
    {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"},
    {"x": "*fp32", "out": "*fp32", "n": "i32"},
)
CASES = {
    c.name: c
    for c in (
        Case("good_add", good_add_kernel, 1 << 24, {"BLOCK": 1024, "num_warps": 4}, P3, None),
        Case(
            "strided_copy",
            strided_copy_kernel,
            1 << 22,
            {"BLOCK": 1024, "num_warps": 4, "STRIDE": 32},
            P1,
            ("ncu", "global_ld_sectors_per_request", "vector_width"),
        ),
        Case(
            "spill",
            spill_kernel,
            1 << 24,
            {"BLOCK": 8192, "num_warps": 1},
            P1,
            ("sass", "local_memory_instructions", "num_warps"),
        ),
        Case(
            "tiny_grid",
            tiny_grid_kernel,
            1 << 20,
            {"BLOCK": 1024, "num_warps": 4, "rows_per_program": 256},
            P3,
            ("ncu", "waves_per_sm", "rows_per_program"),
        ),
    )
}


def _constexprs(case: Case) -> dict:
    k = {"BLOCK": case.knobs["BLOCK"]}
    if "STRIDE" in case.knobs:
        k["STRIDE"] = case.knobs["STRIDE"]
    if "rows_per_program" in case.knobs:
        k["ROWS_PER_PROGRAM"] = case.knobs["rows_per_program"]
    return k


def ptxas_report(ptx: str, arch: str = "sm_90a") -> str:
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        proc = subprocess.run(
            [
                get_ptxas(90).path,
                f"-arch={arch}",
                "-v",
                str(Path(tmp) / "k.ptx"),
                "-o",
                str(Path(tmp) / "k.cubin"),
            ],
            capture_output=True,
            text=True,
        )
    return proc.stdout + proc.stderr


def cpu_fixtures(dest: Path) -> None:
    """Real SASS and ptxas -v for sm_90a, compiled here without a GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernelpro_backend.profilers.sass import disassemble

    dest.mkdir(parents=True, exist_ok=True)
    for case in CASES.values():
        consts = _constexprs(case)
        sig = dict(case.signature) | {k: "constexpr" for k in consts}
        aligned = {(i,): [["tt.divisibility", 16]] for i in range(len(case.signature))}
        src = ASTSource(case.kernel, signature=sig, constexprs=consts, attrs=aligned)
        k = triton.compile(
            src, target=GPUTarget("cuda", 90, 32), options={"num_warps": case.knobs["num_warps"]}
        )
        (dest / f"sass_{case.name}.txt").write_text(disassemble(k.asm["cubin"]))
        (dest / f"ptxas_{case.name}.txt").write_text(ptxas_report(k.asm["ptx"]))
        print(f"wrote sass_{case.name}.txt, ptxas_{case.name}.txt")


def launch_child(name: str) -> None:
    import torch

    case = CASES[name]
    args = case.inputs()
    for _ in range(2):
        case.launch(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    case.launch(*args)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def measured_ceilings():
    import torch

    from kernelpro_backend.profilers.roofline import Roofs

    a = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        b.copy_(a)
    end.record()
    end.synchronize()
    bandwidth = 2 * a.numel() * 20 / (start.elapsed_time(end) / 1e3)
    props = torch.cuda.get_device_properties(0)
    # float32 on CUDA cores: SMs x 128 FMA lanes x 2 FLOP x ~1.98 GHz (H100 SXM boost)
    return Roofs(
        bytes_per_s=bandwidth,
        flops_per_s=props.multi_processor_count * 128 * 2 * 1.98e9,
        sm_count=props.multi_processor_count,
    )


def gpu_run(out: Path, fixtures: Path) -> int:
    import torch

    from kernelpro_backend.profilers import ncu as ncu_mod
    from kernelpro_backend.profilers.api import profile_kernel
    from kernelpro_backend.profilers.compiler_resources import resources_of_triton
    from kernelpro_backend.profilers.sass import disassemble
    from kernelpro_backend.profilers.timeline import record_trace
    from kernelpro_backend.profilers.tools import ProfileTarget, registered

    fixtures.mkdir(parents=True, exist_ok=True)
    ceilings = measured_ceilings()
    print(f"ceilings: {ceilings}")
    rows, results, failures = [], {}, []
    for case in CASES.values():
        args = case.inputs()
        compiled = case.launch(*args)
        torch.cuda.synchronize()
        res = resources_of_triton(compiled)
        (fixtures / f"sass_{case.name}.txt").write_text(disassemble(compiled.asm["cubin"]))
        (fixtures / f"ptxas_{case.name}.txt").write_text(ptxas_report(compiled.asm["ptx"]))
        meta = {
            "name": compiled.name,
            "n_regs": res.registers,
            "n_spills": res.spill_store_bytes,
            "shared": res.shared_bytes,
            "num_warps": res.num_warps,
            "knobs": case.knobs,
        }
        (fixtures / f"triton_meta_{case.name}.json").write_text(json.dumps(meta, indent=1))
        command = [sys.executable, str(Path(__file__).resolve()), "--launch", case.name]
        t0 = time.time()
        try:
            csv_text, _ = ncu_mod.run_ncu(command, kernel_regex=compiled.name)
            (fixtures / f"ncu_{case.name}.csv").write_text(csv_text)
        except Exception as exc:
            print(f"ncu failed on {case.name}: {exc}")
        ncu_s = time.time() - t0
        target = ProfileTarget(
            fn=lambda *a, c=case: c.launch(*a),
            inputs=args,
            knobs=case.knobs,
            kernel_name=compiled.name,
            compiled=[compiled],
            ncu_command=command,
        )
        report = profile_kernel(
            target.fn,
            args,
            flops=case.flops,
            bytes=case.bytes,
            ceilings=ceilings,
            grid_size=case.grid,
            target=target,
            tools=sorted(registered()),
        )
        print(f"\n=== {case.name} (ncu {ncu_s:.1f} s) ===\n{report.text()}")
        results[case.name] = report.to_dict()
        high = [f for f in report.findings if f.severity.value == "high"]
        if case.flaw is None:
            ok = not high
            verdict = (
                "no high finding"
                if ok
                else f"UNEXPECTED high: {[f.tool + '.' + f.metric for f in high]}"
            )
        else:
            tool, metric, knob = case.flaw
            hit = [f for f in report.findings if f.tool == tool and f.metric == metric]
            ok = bool(hit) and any(knob in dict(f.suggestion) for f in hit)
            verdict = f"{tool}.{metric} -> {dict(hit[0].suggestion) if hit else 'MISSING'}"
        if not ok:
            failures.append(case.name)
        rows.append(
            (
                case.name,
                report.roofline.bottleneck.value,
                f"{report.measured_ms * 1e3:.1f}",
                f"{report.roofline.sol_fraction:.2f}",
                len(high),
                "ok" if ok else "FAIL",
                verdict,
            )
        )

    x = torch.randn(64, 1000, device="cuda")
    trace = record_trace(lambda t: torch.softmax(t, -1) * 2 + 1, [x], calls=5)
    (fixtures / "timeline_eager_chain.json").write_text(json.dumps(trace))
    (out / "profilers_results.json").write_text(json.dumps(results, indent=1, default=str))
    with tarfile.open(out / "fixtures.tar.gz", "w:gz") as tar:
        for f in sorted(fixtures.iterdir()):
            tar.add(f, arcname=f.name)
    print(f"\n{'case':14} {'class':16} {'us':>9} {'SOL':>5} {'high':>4} check  verdict")
    for r in rows:
        print(f"{r[0]:14} {r[1]:16} {r[2]:>9} {r[3]:>5} {r[4]:>4} {r[5]:6} {r[6]}")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launch", choices=sorted(CASES))
    parser.add_argument("--cpu-fixtures", type=Path)
    args = parser.parse_args()
    if args.launch:
        launch_child(args.launch)
        return 0
    if args.cpu_fixtures:
        cpu_fixtures(args.cpu_fixtures)
        return 0
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    return gpu_run(out, Path(os.environ.get("KP_FIXTURES_DIR", out / "fixtures")))


if __name__ == "__main__":
    sys.exit(main())
