"""Shared helpers of the codegen tests: collecting a model's subgraphs through the backend,
running a spec's kernel under the interpreter and comparing it with the reference subgraph.

Tolerance comes from the dtype: float32 rtol 1e-5, bfloat16/fp16 rtol 1.6e-2 (one bf16 ulp
is 2^-7 = 7.8e-3), with an absolute term of the same size scaled by the output's magnitude
(a sum of 256 products carries rounding error proportional to the size of its terms, not to
its possibly cancelled result).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.backend import make_backend
from kernelpro_backend.codegen import KernelSpec
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.fx_passes.group import Group
from kernelpro_backend.fx_passes.ops import Role
from kernelpro_backend.fx_passes.subgraph import subgraph_of_group
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime.spec_kernel import build_kernel
from kernelpro_backend.runtime.validate import _Tf32OnCpu

RTOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
ATOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def refusal(sg: Subgraph) -> Exception | None:
    """Why the lowering refuses `sg` (its `Unsupported` error), or None when it lowers."""
    from kernelpro_backend.codegen.errors import Unsupported
    from kernelpro_backend.lowering import lower

    try:
        lower(sg)
    except Unsupported as e:
        return e
    return None


def collect(model: nn.Module, inputs: Sequence[torch.Tensor], train: bool = True) -> list[Subgraph]:
    """Every subgraph the partitioner finds in the model's forward (and backward) graphs."""
    store: list[Subgraph] = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, options={"fallback": "eager", "search": "off"})
    if train:
        out = compiled(*inputs)
        (out if isinstance(out, torch.Tensor) else out[0]).float().sum().backward()
    else:
        with torch.no_grad():
            compiled(*inputs)
    return store


def traced_subgraph(
    fn: Callable[..., object], inputs: Sequence[torch.Tensor], kind: str
) -> Subgraph:
    """A subgraph holding every op of `fn`, for ops the partitioner does not group."""
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    group = Group(nodes=nodes, mask=0, attention=kind == "attention")
    group.anchor = Role.GEMM if kind == "gemm" else None
    return subgraph_of_group(group, "inference", "ieee")


def decomposed_subgraph(fn: Callable[..., object], *inputs: torch.Tensor) -> Subgraph:
    """The one subgraph the partitioner cuts from `fn` traced under Inductor's decompositions."""
    from torch._inductor.decomposition import select_decomp_table

    from kernelpro_backend.fx_passes import find_subgraphs

    gm = make_fx(fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*inputs)
    (sg,) = find_subgraphs(gm, "inference")
    return sg


def bias_gelu_subgraph(m: int, k: int, n: int, dtype: torch.dtype) -> Subgraph:
    """GELU(x @ w + b), x [m, k], w [k, n]: the GEMM + epilogue subgraph of a linear layer."""
    x, w, b = (
        torch.randn(m, k, dtype=dtype),
        torch.randn(k, n, dtype=dtype),
        torch.randn(n, dtype=dtype),
    )
    gelu = torch.nn.functional.gelu
    return traced_subgraph(lambda b, a, c: (gelu(torch.addmm(b, a, c)),), (b, x, w), "gemm")


def compute_dtype(sg: Subgraph) -> torch.dtype:
    """The lowest float precision the subgraph reads or writes: it sets the tolerance."""
    names = {dt for _, _, dt in (*sg.input_meta, *sg.output_meta)}
    for low in ("bfloat16", "float16"):
        if low in names:
            return getattr(torch, low)
    return torch.float32


def check(
    sg: Subgraph,
    spec: KernelSpec | None = None,
    seed: int = 0,
    inputs: list[torch.Tensor] | None = None,
) -> KernelSpec:
    """Build the spec (default: lowered), run it on fresh inputs (or on `inputs`) and compare
    with the reference subgraph: values within the dtype tolerance, exact shapes/strides/dtypes,
    inputs unmodified."""
    spec = spec or lower(sg)
    inputs = inputs if inputs is not None else sg.make_inputs(seed)
    before = [x.clone() for x in inputs]
    # a tf32 spec (a convolution under cuDNN's default policy) against the reference with its
    # float32 operands rounded to tf32, as the search's validator computes it on the CPU
    with _Tf32OnCpu() if spec.precision == "tf32" else contextlib.nullcontext():
        expected = sg.module()(*inputs)
    got = build_kernel(spec)(*inputs)
    assert len(got) == len(expected)
    dt = compute_dtype(sg)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        where = f"{sg.pattern} ({sg.graph}) output {i} with {dict(spec.knobs)}"
        assert g.shape == e.shape and g.dtype == e.dtype, where
        assert g.stride() == e.stride(), where
        if e.dtype.is_floating_point:
            finite = e.float()[e.float().isfinite()]
            scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
            torch.testing.assert_close(
                g.float(),
                e.float(),
                rtol=RTOL[dt],
                atol=ATOL[dt] * scale,
                equal_nan=True,  # integer inputs of backward graphs (counts) may be 0: x/0 both sides
                msg=lambda m, where=where: f"{where}: {m}",
            )
        else:
            assert torch.equal(g, e), where
    for a, b in zip(inputs, before, strict=True):  # exactly the same, NaN where NaN was
        torch.testing.assert_close(
            a, b, rtol=0, atol=0, equal_nan=True, msg="the kernel modified an input"
        )
    return spec


def cluster_alternatives(seed: KernelSpec) -> list[KernelSpec]:
    """The seed's row-resident alternatives (row_cluster), without its others (row_split)."""
    from kernelpro_backend.codegen import alternatives

    return [a for a in alternatives(seed) if a.template == "row_cluster"]
