"""The contract of a free-form CUDA candidate: its source and launch header.

Owns: parsing the launch header of `SourceCandidate(language="cuda", source, entry)` into a
`LaunchSpec`, and the small expression language the header is written in.
Must not: resolve it for concrete shapes (plan.py), compile (compile.py), load or
launch (driver.py) anything.

The contract (what a proposer writes)
-------------------------------------
`source` is CUDA C++ (CuTe/CUTLASS headers may be included; compiled with -std=c++17) with one
or more `extern "C" __global__` kernels, and one comment that starts with `/* kernelpro-launch`
holding a JSON object (Python literal syntax is accepted too) that says how to call them.
`entry` is the name of the first kernel launched. The kernel must not allocate, synchronise,
or read anything but its arguments. Example, a row softmax over a float32 input of shape (R, C):

    /* kernelpro-launch
    {
      "outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}],
      "grid": ["in0.shape[0]"],
      "block": [256],
      "smem": 0,
      "args": ["in0", "out0", {"i32": "in0.shape[1]"}, {"i64": "in0.stride(0)"}]
    }
    */
    extern "C" __global__ void row_softmax(const float* x, float* y, int cols, long long ld) {...}

Keys:
- "outputs": one object per subgraph output, in canonical order: "shape" (a list of integer
  expressions, or one expression such as "in0.shape"), "dtype" ("float32", "bfloat16", ... or
  an expression such as "in0.dtype"), optional "stride" (list of integer expressions; default
  contiguous), optional "init": "zeros" (default "empty": uninitialised, and the evaluator
  fills it with garbage before each run, so write every element or ask for zeros).
- "scratch" (optional): [{"bytes": expr, "init": "zeros"|"empty"}, ...], device buffers the
  kernels may use, passed as "tmp0", "tmp1", ...
- "grid", "block": 1 to 3 integer expressions each (x, y, z); missing dimensions are 1.
  "smem": bytes of dynamic shared memory (default 0; above 48 KiB is opted in for you).
- "args": the kernel's parameters in order. "inK" / "outK" / "tmpK" pass the K-th input /
  output / scratch buffer as a device pointer (to its first element; strides are yours to pass).
  A scalar is a one-key object naming its C type: {"i32": expr} (int), {"u32": expr},
  {"i64": expr} (long long), {"u64": expr}, {"f32": expr} (float), {"f64": expr} (double).
- Several kernels in sequence: "launches": [{"kernel": name, "grid", "block", "smem",
  "args"}, ...] instead of the top-level grid/block/smem/args ("kernel" defaults to entry).
Expressions are Python syntax over: integer and float literals; `inK` (K-th input, canonical
order) and `outK` (K-th output) with `.shape[i]`, `.stride(i)`, `.numel()`, `.ndim`,
`.dtype`; + - * / // % << >>, unary minus; cdiv(a, b), min(...), max(...).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from typing import Any

from .expr import Expr, LaunchSpecError, TensorMeta

__all__ = ["CONTRACT", "Expr", "LaunchSpec", "LaunchSpecError", "TensorMeta", "parse_launch"]

HEADER = "kernelpro-launch"
# The contract as text, for a proposer's prompt (the LLM proposer puts it in its instructions).
# The rules only: from below the section's heading, not the module's title line.
_HEAD = "The contract (what a proposer writes)"
CONTRACT = (__doc__ or "").split(_HEAD, 1)[-1].lstrip("-\n").strip()
# C type of a scalar argument -> the integer range it holds (None: floating point)
SCALAR_TYPES: dict[str, tuple[int, int] | None] = {
    "i32": (-(2**31), 2**31),
    "u32": (0, 2**32),
    "i64": (-(2**63), 2**63),
    "u64": (0, 2**64),
    "f32": None,
    "f64": None,
}
DTYPES = {"float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32"}
DTYPES |= {"int64", "bool"}
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK_THREADS = 1024
_HEADER_RE = re.compile(r"/\*\s*" + HEADER + r"\b(.*?)\*/", re.DOTALL)
_TENSOR_NAME = re.compile(r"(in|out|tmp)(\d+)$")


def _exprs(raw: Any, what: str, low: int = 1, high: int = 3) -> tuple[Expr, ...]:
    items = raw if isinstance(raw, list | tuple) else [raw]
    if not low <= len(items) <= high:
        raise LaunchSpecError(f"{what} needs {low} to {high} entries, got {raw!r}")
    return tuple(_expr(v, what) for v in items)


def _expr(raw: Any, what: str) -> Expr:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise LaunchSpecError(f"{what}: {raw!r} is neither a number nor an expression string")
    return Expr(str(raw))


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    shape: Expr | tuple[Expr, ...]  # one expression giving a tuple, or one per dimension
    dtype: str | Expr
    stride: tuple[Expr, ...] | None = None
    zeros: bool = False

    @classmethod
    def parse(cls, raw: Any, k: int) -> OutputSpec:
        what = f"outputs[{k}]"
        if not isinstance(raw, dict) or "shape" not in raw or "dtype" not in raw:
            raise LaunchSpecError(f'{what} must be an object with "shape" and "dtype"')
        shape = raw["shape"]
        parsed_shape = _expr(shape, what) if isinstance(shape, str) else _exprs(shape, what, 0, 8)
        dtype = str(raw["dtype"]).removeprefix("torch.")
        stride = raw.get("stride")
        return cls(
            parsed_shape,
            dtype if dtype in DTYPES else Expr(dtype),
            None if stride is None else _exprs(stride, f"{what}.stride", 0, 8),
            _init(raw, what),
        )


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    tensor: str | None = None  # "in0", "out1", "tmp0"
    ctype: str | None = None  # scalar C type, with expr
    expr: Expr | None = None

    @classmethod
    def parse(cls, raw: Any, what: str) -> ArgSpec:
        if isinstance(raw, str) and _TENSOR_NAME.match(raw.strip()):
            return cls(tensor=raw.strip())
        if isinstance(raw, dict) and len(raw) == 1:
            ((ctype, expr),) = raw.items()
            if ctype in SCALAR_TYPES:
                return cls(ctype=ctype, expr=_expr(expr, what))
        raise LaunchSpecError(
            f"{what} is {raw!r}: an argument is a tensor name (in0, out0, tmp0) or a "
            f'typed scalar such as {{"i32": "in0.shape[1]"}} (types: {", ".join(SCALAR_TYPES)})'
        )


@dataclasses.dataclass(frozen=True)
class LaunchStep:
    kernel: str
    grid: tuple[Expr, ...]
    block: tuple[Expr, ...]
    smem: Expr
    args: tuple[ArgSpec, ...]

    @classmethod
    def parse(cls, raw: Any, kernel: str, what: str) -> LaunchStep:
        if not isinstance(raw, dict):
            raise LaunchSpecError(f"{what} must be an object")
        missing = [k for k in ("grid", "block", "args") if k not in raw]
        if missing:
            raise LaunchSpecError(f"{what} lacks {', '.join(missing)}")
        if not isinstance(raw["args"], list):
            raise LaunchSpecError(f"{what}.args must be a list, got {raw['args']!r}")
        return cls(
            kernel=str(raw.get("kernel", kernel)),
            grid=_exprs(raw["grid"], f"{what}.grid"),
            block=_exprs(raw["block"], f"{what}.block"),
            smem=_expr(raw.get("smem", 0), f"{what}.smem"),
            args=tuple(ArgSpec.parse(a, f"{what}.args[{i}]") for i, a in enumerate(raw["args"])),
        )


def _init(raw: dict[str, Any], what: str) -> bool:
    init = raw.get("init", "empty")
    if init not in ("empty", "zeros"):
        raise LaunchSpecError(f'{what}.init must be "empty" or "zeros", got {init!r}')
    return bool(init == "zeros")


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """The parsed header. `raw` is the JSON object as written (stored in cache artifacts)."""

    outputs: tuple[OutputSpec, ...]
    scratch: tuple[tuple[Expr, bool], ...]  # (bytes, zeros)
    launches: tuple[LaunchStep, ...]
    raw: str  # canonical JSON of the header object

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(step.kernel for step in self.launches))

    def to_dict(self) -> dict[str, Any]:
        return dict(json.loads(self.raw))


def parse_launch(source: str, entry: str) -> LaunchSpec:
    """The launch header of a CUDA candidate; raises LaunchSpecError saying what to fix."""
    headers = _HEADER_RE.findall(source)
    if len(headers) != 1:
        raise LaunchSpecError(
            f"a CUDA candidate needs exactly one /* {HEADER} {{...}} */ comment, found "
            f"{len(headers)}; see kernelpro_backend/runtime/cuda/source.py for the format"
        )
    return launch_from_dict(_load_object(headers[0]), entry)


def launch_from_dict(doc: Any, entry: str) -> LaunchSpec:
    if not isinstance(doc, dict):
        raise LaunchSpecError(f"the {HEADER} header must be a JSON object")
    if not isinstance(doc.get("outputs"), list) or not doc["outputs"]:
        raise LaunchSpecError('the header needs "outputs": a non-empty list, one per output')
    outputs = tuple(OutputSpec.parse(o, k) for k, o in enumerate(doc["outputs"]))
    scratch = []
    for k, s in enumerate(doc.get("scratch") or []):
        if not isinstance(s, dict) or "bytes" not in s:
            raise LaunchSpecError(f'scratch[{k}] must be an object with "bytes"')
        scratch.append((_expr(s["bytes"], f"scratch[{k}].bytes"), _init(s, f"scratch[{k}]")))
    if "launches" in doc:
        if not isinstance(doc["launches"], list) or not doc["launches"]:
            raise LaunchSpecError('"launches" must be a non-empty list of launch objects')
        steps = [
            LaunchStep.parse(s, entry, f"launches[{i}]") for i, s in enumerate(doc["launches"])
        ]
    else:
        steps = [LaunchStep.parse(doc, entry, "the header")]
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return LaunchSpec(outputs, tuple(scratch), tuple(steps), raw)


def _load_object(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as json_error:
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            raise LaunchSpecError(
                f"the {HEADER} header is neither JSON nor a Python literal: {json_error}"
            ) from None
