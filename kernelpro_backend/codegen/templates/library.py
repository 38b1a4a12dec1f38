"""A GEMM subgraph as vendor-library calls ("gemm_library"), in two forms:

- "relu": `torch._addmm_activation(bias, a, b)` runs cuBLASLt's GEMM with its bias + ReLU
  epilogue: the output makes one trip to memory, where the fallback writes the GEMM's output and
  reads it back for the ReLU. For a GEMM spec whose epilogue is exactly `relu(acc + bias[n])`
  into one 2-D output. GELU is left out: cuBLASLt's is the tanh approximation, not the erf GELU
  models use. Precision follows PyTorch's float32 matmul setting, as the fallback's GEMM does.
- "tf32x3": a float32 GEMM under `precision="tf32x3"` (any elementwise epilogue) as three
  TF32 products with a two-level accumulation (tf32x3.py says why and how).
- "tf32": a float32 GEMM under PyTorch's tf32 policy (any elementwise epilogue) as one TF32
  product of operands rounded as cuBLAS rounds them (tf32.py).
Each is an alternative of the GEMM's seed (defaults.alternatives; one per seed, the relu form
first), measured by the search like
any candidate; it wins only where it is faster. The relu form cannot be inlined (a library call is
not a Triton launch): it runs behind kernelpro::launch; the tf32x3 and tf32 forms are Triton
launches only.

The rendered module has the generated modules' calling convention (`entry(*inputs, _launch=)`,
loaded like the Triton ones); traced for inlining it records the library op itself.

Owns: `library_epilogue(spec)` (which call a GEMM spec maps to, or None), `launches_only` and
`render_library`.
Must not: choose knobs (it has none) or read fx.
"""

from __future__ import annotations

from typing import Any

from ..gemm_output import dense_output, view_as_output
from ..spec_view import io_names

ENTRY = "entry"


def _ref(arg: Any) -> tuple[str, int]:
    return (str(arg[0]), int(arg[1]))


def library_epilogue(spec: Any) -> str | None:
    """ "relu" when `spec` is a 2-D GEMM computing relu(acc + bias[n]) into one output (under
    any precision but tf32x3); else "tf32x3" / "tf32" when it is a 2-D float32 GEMM under that
    precision with an elementwise epilogue."""
    if spec.template not in ("gemm", "gemm_library") or spec.param("batch") != 1:
        return None
    if spec.precision == "tf32x3":
        return "tf32x3" if _float32_elementwise(spec) else None
    if _bias_relu(spec):
        return "relu"
    return "tf32" if spec.precision == "tf32" and _float32_elementwise(spec) else None


def _bias_relu(spec: Any) -> bool:
    """relu(acc + bias[n]) into one 2-D output, dense or of any strides."""
    if len(spec.outputs) != 1 or len(spec.loads) != 1 or len(spec.ops) != 2:
        return False
    (add, add_args, _), (act, act_args, _) = spec.ops
    if add != "add" or sorted(_ref(a) for a in add_args) != [("A", 0), ("L", 0)]:
        return False
    if act != "relu" or [_ref(a) for a in act_args] != [("T", 0)]:
        return False
    _, _, index = spec.loads[0]
    if [tuple(i) for i in index] != [(1, 1)]:  # the bias runs along n, contiguous
        return False
    ((ref, offset, index, predicate),) = spec.stores
    if _ref(ref) != ("T", 1):
        return False
    shape, stride, _ = spec.outputs[0]
    strided = (  # a 2-D [M, N] output of any strides: the result is copied into it
        tuple(shape) == (spec.param("m"), spec.param("n"))
        and offset == 0
        and not predicate
        and [tuple(i) for i in index] == [(stride[0], 0), (stride[1], 1)]
    )
    return dense_output(spec) or strided


def launches_only(spec: Any) -> bool:
    """Whether the rendered module is Triton launches only (the tf32x3 and tf32 forms): it can
    be precompiled and inlined like a generated module; a library call cannot."""
    return library_epilogue(spec) in ("tf32x3", "tf32")


def _float32_elementwise(spec: Any) -> bool:
    """Float32 operands, and an epilogue of elementwise ops only (no row reduction)."""
    return dict(spec.anchor).get("operand_dtype") == "float32" and not spec.reduced


def _view(name: str, shape: tuple[int, ...], stride: tuple[int, ...], offset: int) -> str:
    return f"{name}.as_strided({shape}, {stride}, {name}.storage_offset() + {offset})"


def render_library(spec: Any) -> tuple[str, str]:
    """(Python source, entry name) of the library call of a spec `library_epilogue` maps to
    "relu" (render.py renders the "tf32x3" and "tf32" forms with their templates)."""
    if library_epilogue(spec) != "relu":  # tf32x3.py, tf32.py
        raise ValueError(f"{spec.pattern or spec.template}: no library call computes this GEMM")
    m, n, k = spec.param("m"), spec.param("n"), spec.param("k")
    a_in, a_off, (_, sam, sak) = spec.param("a")
    b_in, b_off, (_, sbk, sbn) = spec.param("b")
    bias_in, bias_off, _ = spec.loads[0]
    shape, stride, dtype = spec.outputs[0]
    if dense_output(spec):  # [M, N] row after row: the result, viewed as the output's shape
        store = [
            f"    if out.stride() != {(n, 1)} or out.dtype != torch.{dtype}:",
            f"        out = torch.empty(({m}, {n}), dtype=torch.{dtype}, device=out.device)"
            ".copy_(out)",
            f"    return [{view_as_output(spec, 'out')}]",
        ]
    else:  # another 2-D layout: copied into it
        store = [
            f"    if out.stride() != {tuple(stride)} or out.dtype != torch.{dtype}:",
            f"        out = torch.empty_strided({list(shape)}, {list(stride)}, "
            f"dtype=torch.{dtype}, device=out.device).copy_(out)",
            "    return [out]",
        ]
    ins, _ = io_names(spec)
    lines = [
        "import torch",
        "",
        "",
        f"def {ENTRY}({', '.join([*ins, '_launch=None'])}):",
        "    # cuBLASLt GEMM with the bias + ReLU epilogue (no kernel of ours to launch)",
        f"    a = {_view(ins[a_in], (m, k), (sam, sak), a_off)}",
        f"    b = {_view(ins[b_in], (k, n), (sbk, sbn), b_off)}",
        f"    bias = {_view(ins[bias_in], (n,), (1,), bias_off)}",
        "    out = torch._addmm_activation(bias, a, b)",
        *store,
        "",
    ]
    return "\n".join(lines), ENTRY
