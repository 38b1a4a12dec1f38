"""Inlining: generated kernels traced into the aten graph as Triton launch nodes
(rewrite/inline.py).

Tracing needs real `@triton.jit` functions, so the CPU test runs in a subprocess without
Triton's interpreter: it checks the spliced graph's structure (launch nodes in place of the
subgraphs, outputs with the promised layout, a valid graph). Running the inlined graph needs a
GPU: tests/test_inline_gpu.py compiles it with Inductor and checks numerics against eager."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import torch
from helpers import train
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table

from kernelpro_backend import examples, make_backend
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.rewrite.graph import RewriteReport, rewrite_graph

_STRUCTURE = r"""
import json, torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from kernelpro_backend import examples, make_backend
from kernelpro_backend.codegen import Unsupported, build
from kernelpro_backend.lowering import lower
from kernelpro_backend.rewrite.graph import rewrite_graph

class Rowwise:
    def find(self, sg):
        if sg.kind not in ("reduction", "pointwise"):
            return None
        try:
            return build(lower(sg))
        except Unsupported:
            return None

summary = []
def compiler(kind):
    def compile_graph(gm, inputs):
        before = {n.name for n in gm.graph.nodes}
        report = rewrite_graph(gm, kind, Rowwise(), inline=True)
        gm.graph.lint()
        names = [getattr(n.target, "__name__", str(n.target)) for n in gm.graph.nodes]
        hops = [n for n in gm.graph.nodes
                if getattr(n.target, "__name__", "") == "triton_kernel_wrapper_functional"]
        summary.append({
            "graph": kind, "replaced": len(report.replaced), "inlined": len(report.inlined),
            "hops": len(hops), "opaque": sum("kernelpro" in str(n.target) for n in gm.graph.nodes),
            "vals": all("val" in n.meta for n in gm.graph.nodes if n.op == "call_function"),
            "new": sum(n.name not in before for n in gm.graph.nodes),
        })
        raise RuntimeError("structure only")  # nothing here can run the kernels
    return compile_graph

model, (x,) = examples.transformer_block("cpu")
backend = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                       decompositions=select_decomp_table(),
                       partition_fn=min_cut_rematerialization_partition)
try:
    torch.compile(model, backend=backend)(x)
except Exception:
    pass  # the compiler stops every graph after recording it
print(json.dumps(summary))
"""


def test_spec_kernels_trace_into_triton_launch_nodes():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-c", _STRUCTURE], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    forward = summary[0]
    assert forward["graph"] == "forward"
    assert forward["replaced"] >= 2  # the transformer block's norms and softmax at least
    assert forward["inlined"] == forward["replaced"]
    assert forward["hops"] == forward["inlined"]  # one launch per row-wise/pointwise kernel
    assert forward["opaque"] == 0
    assert forward["vals"]  # Inductor needs fake values on every node


_CONV = r"""
import json, torch, torch.nn.functional as F
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx
from kernelpro_backend.codegen import build, seed_configs
from kernelpro_backend.fx_passes import find_subgraphs
from kernelpro_backend.lowering import lower
from kernelpro_backend.rewrite.inline import trace_kernel

def conv(x, w):
    return (F.conv2d(x, w, padding=1),)

x, w = torch.randn(8, 64, 14, 14), torch.randn(64, 64, 3, 3)
gm = make_fx(conv, tracing_mode="fake", decomposition_table=select_decomp_table())(x, w)
(sg,) = find_subgraphs(gm, "inference")
spec = seed_configs(lower(sg))[0]
traced = trace_kernel(build(spec), sg)
targets = [str(n.target) for n in traced.graph.nodes if n.op == "call_function"]
print(json.dumps({"template": spec.template, "knobs": dict(spec.knobs), "targets": targets}))
"""


def test_a_conv_template_with_scratch_buffers_traces_into_launch_nodes():
    """The conv template packs its weight into a scratch buffer (`torch.empty`) by a first
    launch, then convolves: both launches and the allocation trace, so Inductor launches them
    itself (on an H100, L1_63's conv kernel went through the opaque op instead: "traced kernel
    contains aten.empty.memory_format")."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-c", _CONV], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["template"].startswith("conv") and got["knobs"].get("PACK_W") == 1, got
    assert "aten.empty.memory_format" in got["targets"]
    assert sum(t.endswith("triton_kernel_wrapper_functional") for t in got["targets"]) == 2


class _NotJustLaunches:
    """A 'traceable' kernel whose traced form does aten math: inlining must refuse it."""

    name = "not-just-launches"

    def __init__(self, subgraph: Subgraph) -> None:
        self._module = subgraph.module()

    def __call__(self, *inputs):
        return list(self._module(*inputs))

    def traceable(self):
        return self.__call__


class _Provider:
    def find(self, subgraph: Subgraph):
        return _NotJustLaunches(subgraph) if subgraph.kind == "reduction" else None


def _inlining_backend(provider, reports: list[RewriteReport]):
    def compiler(kind):
        def compile_graph(gm, inputs):
            reports.append(rewrite_graph(gm, kind, provider, inline=True))
            return make_boxed_func(gm.forward)

        return compile_graph

    return aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        decompositions=select_decomp_table(),
        partition_fn=min_cut_rematerialization_partition,
    )


def test_untraceable_kernel_goes_through_the_op_and_says_so(caplog, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # tracing itself is under test
    model_ref, (x,) = examples.transformer_block("cpu")
    model, _ = examples.transformer_block("cpu")
    ref_losses, _ = train(model_ref, x, steps=1)
    reports: list[RewriteReport] = []
    backend = _inlining_backend(_Provider(), reports)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        losses, _ = train(model, x, lambda m: torch.compile(m, backend=backend), steps=1)
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    assert any(r.replaced for r in reports)
    assert not any(r.inlined for r in reports)
    assert "cannot inline kernel" in caplog.text and "not just launches" in caplog.text


class _TracesToALaunch:
    """Runs as the reference module; traces to one Triton launch that fills its outputs."""

    name = "traces-to-a-launch"

    def __init__(self, subgraph: Subgraph) -> None:
        self._module = subgraph.module()
        self._metas = subgraph.output_meta

    def __call__(self, *inputs):
        return list(self._module(*inputs))

    def traceable(self):
        import triton
        import triton.language as tl
        from torch.library import wrap_triton

        @triton.jit
        def fill(out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + offs, 0.0, mask=offs < n)

        def entry(*inputs):
            outs = []
            for shape, stride, dt in self._metas:
                out = torch.empty_strided(shape, stride, dtype=getattr(torch, dt))
                wrap_triton(fill)[(1,)](out, out.numel(), BLOCK=16)
                outs.append(out)
            return outs

        return entry


def test_inductor_failure_on_inlined_graph_retries_through_the_op(caplog, monkeypatch):
    import torch._inductor.compile_fx as compile_fx

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    real = compile_fx.compile_fx_inner

    def failing_on_launch_nodes(gm, *args, **kwargs):
        if any("triton_kernel_wrapper" in str(n.target) for n in gm.graph.nodes):
            raise RuntimeError("simulated Inductor failure on a user Triton kernel")
        return real(gm, *args, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", failing_on_launch_nodes)

    class Provider:
        def find(self, subgraph):
            return _TracesToALaunch(subgraph) if subgraph.pattern == "rms_norm" else None

    model_ref, (x,) = examples.transformer_block("cpu")
    model, _ = examples.transformer_block("cpu")
    ref_losses, _ = train(model_ref, x, steps=1)
    sessions: list = []
    backend = make_backend(provider=Provider(), sessions=sessions)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        losses, _ = train(model, x, lambda m: torch.compile(m, backend=backend), steps=1)
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    assert "Inductor failed on the forward graph" in caplog.text
    reports = [r for s in sessions for r in s.reports]
    assert any(r.replaced for r in reports) and not any(r.inlined for r in reports)
