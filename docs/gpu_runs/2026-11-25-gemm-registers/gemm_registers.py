"""Registers and spills of GEMM + epilogue kernels for sm_90, compiled offline (no GPU needed):
the template's Triton source for a bf16 linear + bias + epilogue at 8192x1024 -> 4096, compiled
by Triton for an H100 target with 16-byte-aligned pointers (what the JIT assumes for aligned
tensors; without it the loads are not pipelined), then `cuobjdump --dump-resource-usage`.

    PYTHONPATH=.:tests/codegen:tests python docs/gpu_runs/2026-11-25-gemm-registers/gemm_registers.py [--knobs '{"BLOCK_N": 128}']
        [--shape 512,8192,512 --knobs '{"SPLIT_K": 4}']  # a split-K GEMM: both kernels

Prints per epilogue and EPILOGUE_SUBTILE: registers per thread, stack bytes (spills), cp.async
count (the pipelined main loop) and shared memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import tempfile

import torch
import torch.nn.functional as F
import triton
from harness import traced_subgraph
from triton.backends.compiler import GPUTarget

from kernelpro_backend.codegen import render
from kernelpro_backend.codegen.build import module_file
from kernelpro_backend.lowering import lower

EPILOGUES = {
    "bias": lambda b, a, c: (torch.addmm(b, a, c),),
    "bias+gelu": lambda b, a, c: (F.gelu(torch.addmm(b, a, c)),),
    "bias+gelu(tanh)": lambda b, a, c: (F.gelu(torch.addmm(b, a, c), approximate="tanh"),),
    "bias+silu*2": lambda b, a, c: (F.silu(torch.addmm(b, a, c)) * 2,),
}
POINTER = {"float32": "*fp32", "bfloat16": "*bf16", "float16": "*fp16"}


def resources(spec, name: str = "kernel") -> dict[str, int]:
    """Resources of the module's @triton.jit `name` ("combine": a split-K GEMM's second
    kernel, launched with one stage)."""
    path = module_file(render(spec).source)
    loader = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    fn, knobs = getattr(module, name), dict(spec.knobs)
    sig = {f"in{i}": POINTER[m[2]] for i, m in enumerate(spec.inputs)}
    sig |= {f"out{i}": POINTER[m[2]] for i, m in enumerate(spec.outputs)}
    sig |= {"partials": "*fp32"}  # a split-K GEMM's float32 partials
    sig = {a: t for a, t in sig.items() if a in fn.arg_names}
    const = {n: knobs.get(n, False) for n in fn.arg_names if n not in sig}
    sig |= dict.fromkeys(const, "constexpr")
    aligned = {
        (i,): [["tt.divisibility", 16]]
        for i, n in enumerate(fn.arg_names)
        if n in sig and sig[n][0] == "*"
    }
    source = triton.compiler.ASTSource(fn, sig, constexprs=const, attrs=aligned)
    stages = knobs["num_stages"] if name == "kernel" else 1
    options = {"num_warps": knobs["num_warps"], "num_stages": stages}
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        usage = subprocess.run(
            [tool, "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    ptx = kernel.asm["ptx"]
    return {
        "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
        "stack": int(re.search(r"STACK:(\d+)", usage).group(1)),
        "cp_async": ptx.count("cp.async.cg") + ptx.count("cp.async.ca"),
        "shared": kernel.metadata.shared,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knobs", default="{}", help="knobs over the seed's, as JSON")
    parser.add_argument("--shape", default="8192,1024,4096", help="M,K,N")
    args = parser.parse_args()
    m, k, n = (int(v) for v in args.shape.split(","))
    x, w, b = (torch.randn(*s, dtype=torch.bfloat16) for s in ((m, k), (k, n), (n,)))
    print(f"{'epilogue':<18}{'knobs':<48}{'regs':>6}{'stack':>7}{'cp.async':>10}{'smem':>8}")
    for name, fn in EPILOGUES.items():
        seed = lower(traced_subgraph(fn, (b, x, w), "gemm")).with_knobs(**json.loads(args.knobs))
        for parts in (1, 2, 4):
            spec = seed.with_knobs(EPILOGUE_SUBTILE=parts)
            knobs = dict(spec.knobs)
            split = knobs["SPLIT_K"]
            label = f"{knobs['BLOCK_M']}x{knobs['BLOCK_N']}x{knobs['BLOCK_K']} w{knobs['num_warps']} subtile {parts}"
            for kernel in ("kernel", "combine") if split > 1 else ("kernel",):
                r = resources(spec, kernel)
                what = label + (f" split {split} {kernel}" if split > 1 else "")
                print(
                    f"{name:<18}{what:<48}{r['registers']:>6}{r['stack']:>7}{r['cp_async']:>10}{r['shared']:>8}"
                )


if __name__ == "__main__":
    main()
