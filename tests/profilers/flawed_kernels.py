"""One good and three deliberately flawed Triton kernels: the profiling tools' live subjects
(test_profilers_gpu.py, test_api.py) and the source of the fixtures in fixtures/.

Kernels: `good_add` (coalesced, 16-byte loads, a full grid), `strided_copy` (each thread reads
32 floats apart: uncoalesced), `spill` (BLOCK=8192 with num_warps=1: 256 live floats per
thread, registers spill), `tiny_grid` (4 programs on 132 SMs). The tools must name each flaw
and propose the knob that fixes it; the good kernel must get no high-severity finding (the GPU
tests assert that).

    python tests/profilers/flawed_kernels.py --launch CASE        # the child that ncu profiles
    python tests/profilers/flawed_kernels.py --cpu-fixtures DIR   # no GPU: real SASS + ptxas -v
    python tests/profilers/flawed_kernels.py --gpu-fixtures DIR   # on the GPU: all fixtures

Owns: the kernels, their launch, and capturing their raw tool outputs as fixtures.
Must not: assert anything (the tests do) or time anything (the tools do).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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


def gpu_fixtures(dest: Path) -> None:
    """Every fixture, captured live: SASS, ptxas -v, Triton metadata and ncu CSV per kernel,
    and a torch.profiler trace of an eager op chain; packed into dest/../fixtures.tar.gz too."""
    import torch

    from kernelpro_backend.profilers import ncu as ncu_mod
    from kernelpro_backend.profilers.compiler_resources import resources_of_triton
    from kernelpro_backend.profilers.sass import disassemble
    from kernelpro_backend.profilers.timeline import record_trace

    dest.mkdir(parents=True, exist_ok=True)
    for case in CASES.values():
        compiled = case.launch(*case.inputs())
        torch.cuda.synchronize()
        res = resources_of_triton(compiled)
        (dest / f"sass_{case.name}.txt").write_text(disassemble(compiled.asm["cubin"]))
        (dest / f"ptxas_{case.name}.txt").write_text(ptxas_report(compiled.asm["ptx"]))
        meta = {
            "name": compiled.name,
            "n_regs": res.registers,
            "n_spills": res.spill_store_bytes,
            "shared": res.shared_bytes,
            "num_warps": res.num_warps,
            "knobs": case.knobs,
        }
        (dest / f"triton_meta_{case.name}.json").write_text(json.dumps(meta, indent=1))
        csv_text, _ = ncu_mod.run_ncu(launch_command(case.name), kernel_regex=compiled.name)
        (dest / f"ncu_{case.name}.csv").write_text(csv_text)
        print(f"wrote the fixtures of {case.name}")
    x = torch.randn(64, 1000, device="cuda")
    trace = record_trace(lambda t: torch.softmax(t, -1) * 2 + 1, [x], calls=5)
    (dest / "timeline_eager_chain.json").write_text(json.dumps(trace))
    with tarfile.open(dest.parent / "fixtures.tar.gz", "w:gz") as tar:
        for f in sorted(dest.iterdir()):
            tar.add(f, arcname=f.name)


def launch_command(name: str) -> list[str]:
    """The command that launches one case in a child process (what ncu profiles)."""
    return [sys.executable, str(Path(__file__).resolve()), "--launch", name]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--launch", choices=sorted(CASES))
    group.add_argument("--cpu-fixtures", type=Path)
    group.add_argument("--gpu-fixtures", type=Path)
    args = parser.parse_args()
    if args.launch:
        launch_child(args.launch)
    elif args.cpu_fixtures:
        cpu_fixtures(args.cpu_fixtures)
    else:
        gpu_fixtures(args.gpu_fixtures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
