import base64
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from profilers_fixtures import KNOBS, read_fixture

from kernelpro_backend.profilers import (
    Bottleneck,
    ProfileTarget,
    Roofs,
    profile_kernel,
    tools_for,
)
from kernelpro_backend.profilers.api import triton_kernels_of
from kernelpro_backend.profilers.sass import find_cuobjdump
from kernelpro_backend.profilers.speed_of_light import subgraph_cost

H100 = Roofs(bytes_per_s=3.0e12, flops_per_s=67e12, sm_count=132)
SCRIPT = Path(__file__).resolve().parent / "flawed_kernels.py"


def test_each_class_gets_its_tools_cheapest_first():
    names = {b: [t.name for t in tools_for(b)] for b in Bottleneck}
    assert names[Bottleneck.LATENCY] == ["ptxas", "timeline", "ncu"]
    assert names[Bottleneck.MEMORY] == ["ptxas", "sass", "energy", "ncu"]
    assert (
        "timeline" in names[Bottleneck.UNDERUTILIZED]
        and "energy" not in names[Bottleneck.UNDERUTILIZED]
    )
    for b in Bottleneck:
        costs = [t.cost_s for t in tools_for(b)]
        assert costs == sorted(costs)
    assert [t.name for t in tools_for(Bottleneck.MEMORY, budget_s=1.5)] == ["ptxas", "sass"]
    with pytest.raises(KeyError, match="unknown profiling tools"):
        tools_for(Bottleneck.MEMORY, names=["vtune"])


_COMPILE_CHILD = """
import base64, importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
spec = importlib.util.spec_from_file_location("flawed_kernels", sys.argv[1])
script = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = script  # dataclasses resolve annotations through sys.modules
spec.loader.exec_module(script)
c = script.CASES[sys.argv[2]]
consts = script._constexprs(c)
sig = dict(c.signature) | {k: "constexpr" for k in consts}
aligned = {(i,): [["tt.divisibility", 16]] for i in range(len(c.signature))}
src = ASTSource(c.kernel, signature=sig, constexprs=consts, attrs=aligned)
k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": c.knobs["num_warps"]})
m = k.metadata
print(json.dumps({"cubin": base64.b64encode(k.asm["cubin"]).decode(), "name": m.name,
                  "shared": m.shared, "num_warps": m.num_warps}))
"""


def _compile_for_sm90(case):
    """Real sm_90 machine code of one of flawed_kernels.py's kernels, compiled on this CPU machine.
    In a child process without TRITON_INTERPRET: Triton reads it when a kernel is decorated and
    again while builtins compile, so the interpreter the CPU suite runs under must not be on."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_CHILD, str(SCRIPT), case],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    meta = types.SimpleNamespace(
        name=out["name"], shared=out["shared"], num_warps=out["num_warps"],
        target=types.SimpleNamespace(arch=90),
    )  # fmt: skip
    return types.SimpleNamespace(asm={"cubin": base64.b64decode(out["cubin"])}, metadata=meta)


@pytest.mark.skipif(find_cuobjdump() is None, reason="needs cuobjdump (bundled with Triton)")
def test_two_stages_on_cpu_with_a_given_time_a_real_cubin_and_a_ptxas_report():
    kernel = _compile_for_sm90("spill")
    target = ProfileTarget(
        knobs=KNOBS["spill"], compiled=[kernel], ptxas_report=read_fixture("ptxas_spill.txt")
    )
    n = 1 << 24
    report = profile_kernel(
        lambda *a: None,
        (),
        flops=3.0 * n,
        bytes=8.0 * n,
        ceilings=H100,
        measured_ms=0.5,
        target=target,
        tools=["sass", "ptxas", "ncu"],
        grid_size=n // 8192,
    )
    assert report.roofline.bottleneck is Bottleneck.UNDERUTILIZED  # 45 us of SOL in 500 us
    assert report.findings[0].tool == "roofline"
    metrics = {(f.tool, f.metric) for f in report.findings}
    assert ("sass", "local_memory_instructions") in metrics and ("ptxas", "spill_bytes") in metrics
    assert "sass" in report.tools_run and "ptxas" in report.tools_run
    # the compiled stand-in has no n_regs: ptxas falls back to the report; ncu is not here
    skipped = dict(report.tools_skipped)
    assert "ncu" in skipped or "ncu" in report.tools_run
    text = report.text()
    assert "under-utilised" in text and "num_warps" in text
    assert report.to_dict()["bottleneck"] == "under-utilised"


def test_triton_kernels_of_finds_the_compiled_kernels_of_jit_functions_and_wrappers():
    from triton.runtime.jit import JITFunction

    def body(x_ptr):  # never compiled: the per-device cache is filled as a launch leaves it
        pass

    jitted = JITFunction(body)
    compiled = types.SimpleNamespace(asm={"cubin": b""}, name="k")
    jitted.device_caches[0] = ({"key": compiled, "pending": object()}, {}, None, None, None)
    autotuned = types.SimpleNamespace(fn=types.SimpleNamespace(fn=jitted))  # Autotuner(Heuristics)
    namespace = {"kernel": autotuned, "torch": torch}
    exec("def entry(x):\n    return [x]\n", namespace)
    assert triton_kernels_of(jitted) == [compiled]
    assert triton_kernels_of(namespace["entry"]) == [compiled]  # through the entry's globals
    assert triton_kernels_of(lambda x: x) == []


def test_a_failing_tool_is_reported_not_raised():
    report = profile_kernel(
        lambda: None,
        (),
        flops=1.0,
        bytes=1e6,
        ceilings=H100,
        measured_ms=0.01,
        target=ProfileTarget(),
        tools=["ptxas"],
    )
    assert report.tools_run == ()
    assert "ptxas" in dict(report.tools_skipped)
    assert "needs compiled Triton kernels" in dict(report.tools_skipped)["ptxas"]


def test_subgraph_cost_counts_matmul_flops_and_external_bytes():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    flops, nbytes = subgraph_cost(lambda x, y: (torch.mm(x, y),), [a, b])
    assert flops == 2 * 64 * 32 * 16
    assert nbytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)
