"""The GEMM template: mm / addmm / bmm / baddbmm with the fused epilogue applied to the
accumulator tile, and row reductions when the row fits one tile (BLOCK_N >= N).

Owns: the Triton kernel - grouped (GROUP_M) tile order, optional persistent tile loop (FLATTEN:
one software pipeline across its tiles), optional split-K (SPLIT_K programs share a tile's K
loop, each storing a float32 partial; a second kernel, `combine`, adds a tile's partials in a
fixed order and runs the epilogue: deterministic, unlike atomics, and open to every epilogue),
operands read through strides (a transposed weight is just other strides), fp32 accumulation,
`tl.dot` input precision from the spec (float32 stays "ieee" unless the spec says tf32 / tf32x3;
tf32 operands are rounded to nearest as cuBLAS does, not truncated as Triton's dot does), and
the main loop's shape specialisation: shapes are static in a spec, so an axis whose size the
tile divides (M by BLOCK_M, N by BLOCK_N, K by BLOCK_K) loads without a mask, and operand
pointers advance by BLOCK_K * stride per step instead of being recomputed.
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from typing import NamedTuple

from ..emitter import Emitter
from ..spec import KernelSpec
from ..spec_view import io_names


class EvenAxes(NamedTuple):
    """Which GEMM axes the tile divides: their main-loop loads need no bounds mask."""

    m: bool
    n: bool
    k: bool


def even_axes(spec: KernelSpec) -> EvenAxes:
    m, n, k = (int(spec.param(x)) for x in ("m", "n", "k"))
    bm, bn, bk = (int(spec.knob(x)) for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return EvenAxes(m % bm == 0, n % bn == 0, k % bk == 0)


def _and(parts: list[str]) -> str | None:
    return " & ".join(f"({p})" for p in parts) if parts else None


def _load(ptrs: str, mask: str | None) -> str:
    return f"tl.load({ptrs}, mask={mask}, other=0.0)" if mask else f"tl.load({ptrs})"


def main_loop(spec: KernelSpec, wide: bool) -> list[str]:
    """Statements from the tile coordinates to the finished fp32 accumulator `acc`."""
    m, n, k = (spec.param(x) for x in ("m", "n", "k"))
    a_in, a_off, (sab, sam, sak) = spec.param("a")
    b_in, b_off, (sbb, sbk, sbn) = spec.param("b")
    split = int(spec.knob("SPLIT_K"))
    even = even_axes(spec)
    precision = {"ieee": "ieee", "tf32": "tf32", "tf32x3": "tf32x3"}[spec.precision]
    low = spec.param("operand_dtype") != "float32"
    dot_kw = "" if low else f', input_precision="{precision}"'
    i64 = ".to(tl.int64)" if wide else ""
    # split-K program pid_k starts at K tile pid_k and strides over SPLIT_K tiles
    k_start = "(pid_k * BLOCK_K + rk)" if split > 1 else "rk"
    a_mask = _and(([] if even.m else [f"rm < {m}"]) + ([] if even.k else ["rk[None, :] < k_left"]))
    b_mask = _and(([] if even.k else ["rk[:, None] < k_left"]) + ([] if even.n else [f"rn < {n}"]))
    k_tiles = -(-k // int(spec.knob("BLOCK_K")))
    loop = f"range(pid_k, {k_tiles}, SPLIT_K)" if split > 1 else f"range(0, {k_tiles})"
    blocks = [spec.knob(x) for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
    note = ", ".join(
        f"{ax}={size} {'is' if ok else 'is not'} a multiple of {blk}"
        for ax, size, blk, ok in zip("MNK", (m, n, k), blocks, even, strict=True)
    )
    tma = spec.knob("LOADS") == "tma"
    if tma:
        load_a, load_b = _descriptor_loads(spec)
        advance: list[str] = []
    else:
        load_a, load_b = _load("a_ptrs", a_mask), _load("b_ptrs", b_mask)
        advance = [
            f"    a_ptrs += BLOCK_K * SPLIT_K * {sak}",
            f"    b_ptrs += BLOCK_K * SPLIT_K * {sbk}",
        ]
    pointers = [
        *_hinted_rows(even.m, even.n, m, n, i64),
        f"a_ptrs = in{a_in} + {a_off} + pid_b * {sab} + ram * {sam} + {k_start}[None, :] * {sak}",
        f"b_ptrs = in{b_in} + {b_off} + pid_b * {sbb} + {k_start}[:, None] * {sbk} + rbn * {sbn}",
        f"# masks only on axes the tile does not divide ({note})",
    ]
    return [
        *tile_coords("tile", i64),
        *([] if tma else ["rk = tl.arange(0, BLOCK_K)", *pointers]),
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"for kt in {loop}:",
        *([f"    k_left = {k} - kt * BLOCK_K"] if not (even.k or tma) else []),
        f"    a = {load_a}",
        f"    b = {load_b}",
        *(
            [
                "    if INTERPRET:  # the CPU interpreter multiplies bf16/fp16 wrongly; widen there",
                "        a = a.to(tl.float32)",
                "        b = b.to(tl.float32)",
            ]
            if low
            else []
        ),
        *(tf32_rounding() if precision == "tf32" and not low else []),
        f"    acc = tl.dot(a, b, acc{dot_kw})",
        *advance,
    ]


def _hinted_rows(even_m: bool, even_n: bool, m: int, n: int, i64: str) -> list[str]:
    """The rows of A (`ram`) and columns of B (`rbn`) the loads read: on an axis the tile
    divides, marked contiguous and a multiple of the block as Inductor's mm template marks them
    (`% size` kept from it: a no-op there). H100, KernelBench L1_9 (fp32 32768x32 @ 32x32768),
    64x64x32 tiles: 2.10 ms against 3.45 without the marks (scripts/gpu_ieee_gemm_forms.py,
    BENCHMARKS.md "IEEE float32 tiles"). On an axis it does not divide, the tile's own rows
    (the loads are masked there)."""
    out = []
    for name, even, size, pid, block, axis, own in (
        ("ram", even_m, m, "pid_m", "BLOCK_M", "[:, None]", "rm"),
        ("rbn", even_n, n, "pid_n", "BLOCK_N", "[None, :]", "rn"),
    ):
        out.append(
            f"{name} = tl.max_contiguous(tl.multiple_of(({pid} * {block} + tl.arange(0, {block}))"
            f"{i64} % {size}, {block}), {block}){axis}"
            if even
            else f"{name} = {own}"
        )
    return out


def tile_coords(tile: str, i64: str) -> list[str]:
    """The program's tile (pid_m, pid_n) and its rows `rm` and columns `rn` from tile index
    `tile`, in grouped order."""
    return [
        "# grouped order: GROUP_M row-tiles share each column of B while it is in L2",
        f"group = {tile} // (GROUP_M * num_pid_n)",
        "first_m = group * GROUP_M",
        "group_m = tl.minimum(num_pid_m - first_m, GROUP_M)",
        f"pid_m = first_m + ({tile} % (GROUP_M * num_pid_n)) % group_m",
        f"pid_n = ({tile} % (GROUP_M * num_pid_n)) // group_m",
        f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]){i64}",
        f"rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]){i64}",
    ]


def tf32_rounding() -> list[str]:
    """Round both float32 operand tiles to the nearest tf32 (10 mantissa bits, ties away from
    zero: `cvt.rna.tf32.f32`), as cuBLAS does under PyTorch's tf32 policy. Triton's tf32
    `tl.dot` feeds the raw float32 bits to the tensor cores, which drop the low 13 bits (a
    truncation: about twice the error of PyTorch's tf32, biased toward zero; Triton issue
    4574). Rounded values have those bits zero already, so the hardware keeps them exactly.
    The interpreter has no PTX: there the same rounding is done with integer ops."""
    asm = '"cvt.rna.tf32.f32 $0, $1;", "=r,r"'
    lines = [
        "    # tf32 as PyTorch's (rounded, not truncated); see codegen/templates/gemm.tf32_rounding"
    ]
    lines.append("    if INTERPRET:")
    for x in ("a", "b"):
        lines.append(
            f"        {x} = tl.where({x} != {x}, {x}, "
            f"(({x}.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000)"
            ".to(tl.float32, bitcast=True))"
        )
    lines.append("    else:")
    for x in ("a", "b"):
        lines.append(
            f"        {x} = tl.inline_asm_elementwise({asm}, [{x}], dtype=tl.float32, "
            "is_pure=True, pack=1)"
        )
    return lines


def tma_descriptors(spec: KernelSpec) -> list[str]:
    """Device-side TMA descriptors of both operands, made once per program (the host sets
    Triton's allocator for their scratch). A row-major operand is described as stored, a
    column-major one as its transpose (the unit stride must be last); the descriptor zero-fills
    out-of-bounds boxes, so odd shapes need no masks."""
    m, n, k = (spec.param(x) for x in ("m", "n", "k"))
    a_in, a_off, (sab, sam, sak) = spec.param("a")
    b_in, b_off, (sbb, sbk, sbn) = spec.param("b")
    a_shape, a_box = (f"[{m}, {k}], strides=[{sam}, 1]", "[BLOCK_M, BLOCK_K]")
    if sak != 1:
        a_shape, a_box = (f"[{k}, {m}], strides=[{sak}, 1]", "[BLOCK_K, BLOCK_M]")
    b_shape, b_box = (f"[{k}, {n}], strides=[{sbk}, 1]", "[BLOCK_K, BLOCK_N]")
    if sbn != 1:
        b_shape, b_box = (f"[{n}, {k}], strides=[{sbn}, 1]", "[BLOCK_N, BLOCK_K]")
    return [
        f"a_desc = tl.make_tensor_descriptor(in{a_in} + {a_off} + pid_b * {sab}, shape={a_shape}, "
        f"block_shape={a_box})",
        f"b_desc = tl.make_tensor_descriptor(in{b_in} + {b_off} + pid_b * {sbb}, shape={b_shape}, "
        f"block_shape={b_box})",
    ]


def _descriptor_loads(spec: KernelSpec) -> tuple[str, str]:
    _, _, (_, _, sak) = spec.param("a")
    _, _, (_, _, sbn) = spec.param("b")
    a = (
        "a_desc.load([pid_m * BLOCK_M, kt * BLOCK_K])"
        if sak == 1
        else "a_desc.load([kt * BLOCK_K, pid_m * BLOCK_M]).T"
    )
    b = (
        "b_desc.load([kt * BLOCK_K, pid_n * BLOCK_N])"
        if sbn == 1
        else "b_desc.load([pid_n * BLOCK_N, kt * BLOCK_K]).T"
    )
    return a, b


def _epilogue(spec: KernelSpec, em: Emitter, n: int, i64: str) -> None:
    """The epilogue and stores over the accumulator, whole or (EPILOGUE_SUBTILE = 2 or 4) on
    column slices one after the other: `acc` is split in registers (reshape, permute, split:
    no data moves) and each slice gets its own columns `rn`, mask and epilogue values, so only
    a slice's temporaries are live at once. Per-row values (ROW level) are emitted once."""
    parts = int(spec.knob("EPILOGUE_SUBTILE") or 1)
    if parts == 1:
        em.local_memo[("A", 0)] = "acc"
        for j in range(len(spec.stores)):
            em.store(j, f"out{j}")
        return
    slices, width = ["acc"], "BLOCK_N"
    while len(slices) < parts:  # halve every slice: columns [0, w/2) and [w/2, w)
        halves = []
        for name in slices:
            em.line(
                f"{name}_0, {name}_1 = tl.split(tl.permute(tl.reshape({name}, "
                f"(BLOCK_M, 2, {width} // 2)), (0, 2, 1)))"
            )
            halves += [f"{name}_0", f"{name}_1"]
        slices, width = halves, f"{width} // 2"
    for i, name in enumerate(slices):
        em.line(f"# columns {i}/{parts} of the tile")
        em.line(
            f"rn = (pid_n * BLOCK_N + {i} * (BLOCK_N // {parts}) + "
            f"tl.arange(0, BLOCK_N // {parts})[None, :]){i64}"
        )
        em.line(f"mask = row_mask & (rn < {n})")
        em.local_memo = {("A", 0): name}
        for j in range(len(spec.stores)):
            em.store(j, f"out{j}")


def render_gemm(spec: KernelSpec) -> tuple[str, str]:
    m, n, k, batch = (spec.param(x) for x in ("m", "n", "k", "batch"))
    _, _, (sab, sam, sak) = spec.param("a")
    _, _, (sbb, sbk, sbn) = spec.param("b")
    batched = len(spec.domain) == 3
    coords = ["pid_b", "rm", "rn"] if batched else ["rm", "rn"]
    em = Emitter(spec, coords, [len(spec.domain) - 1], n, row_var="rm")
    split = int(spec.knob("SPLIT_K"))
    persistent = bool(spec.knob("PERSISTENT"))
    wide = max(m * sam, k * sak, n * sbn, k * sbk, batch * max(sab, sbb), m * n * batch) > 2**30
    ins, outs = io_names(spec)
    params = [*ins, "partials"] if split > 1 else [*ins, *outs]
    lines = [
        "@triton.jit",
        f"def kernel({', '.join(params)}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
        "BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, INTERPRET: tl.constexpr):",
        "    pid = tl.program_id(0)",
        "    pid_b = tl.program_id(1)" + (".to(tl.int64)" if wide else ""),
        "    pid_k = tl.program_id(2)",
        f"    num_pid_m = tl.cdiv({m}, BLOCK_M)",
        f"    num_pid_n = tl.cdiv({n}, BLOCK_N)",
    ]
    if spec.knob("LOADS") == "tma":
        lines += ["    " + x for x in tma_descriptors(spec)]
    pad = "    "
    i64 = ".to(tl.int64)" if wide else ""
    body = main_loop(spec, wide)
    if persistent and spec.knob("FLATTEN"):
        # One software pipeline over tiles and K steps (tl.range flatten): the next tile's
        # first loads are issued before this tile's epilogue. The epilogue takes its tile from
        # a counter of its own, as Triton's persistent-matmul tutorial does, so no value is
        # carried from the pipelined loads into the epilogue.
        lines += [
            "    tile_c = pid - tl.num_programs(0)",
            "    for tile in tl.range(pid, num_pid_m * num_pid_n, tl.num_programs(0), "
            "flatten=True):",
        ]
        body += ["tile_c += tl.num_programs(0)", *tile_coords("tile_c", i64)]
        pad = "        "
    elif persistent:
        lines.append("    for tile in range(pid, num_pid_m * num_pid_n, tl.num_programs(0)):")
        pad = "        "
    else:
        lines.append("    tile = pid")
    body += [f"row_mask = rm < {m}", f"mask = row_mask & (rn < {n})"]
    em.indent = len(pad) // 4
    _epilogue(spec, em, n, i64)
    if split > 1:  # this kernel stores its partial; `combine` runs the epilogue
        part = f"partials + pid_k * {batch * m * n} + {_partial_offset(spec)}"
        body.append(f"tl.store({part}, acc, mask=mask)")
        lines += [pad + b for b in body]
        lines += ["", "", *_combine(spec, ins, outs, em.lines, i64)]
    else:
        lines += [pad + b for b in body] + em.lines
    tiles = _tile_count(spec)
    grid = (
        f"(min({tiles}, {int(spec.knob('SM_PROGRAMS'))} * num_sms), {batch}, {split})"
        if persistent
        else f"({tiles}, {batch}, {split})"
    )
    return "\n".join(em.helper_source() + lines), grid


def _partial_offset(spec: KernelSpec) -> str:
    """Where a tile element's float32 partial is within one split's (batch, M, N) block."""
    m, n = spec.param("m"), spec.param("n")
    batch = f"pid_b * {m * n} + " if len(spec.domain) == 3 else ""
    return f"{batch}rm * {n} + rn"


def _combine(
    spec: KernelSpec, ins: list[str], outs: list[str], epilogue: list[str], i64: str
) -> list[str]:
    """The split-K second kernel: per output tile (same tiles and order as the first), the
    SPLIT_K partials added in split order, then the spec's epilogue and stores."""
    m, n, batch = (spec.param(x) for x in ("m", "n", "batch"))
    return [
        "@triton.jit",
        f"def combine({', '.join([*ins, *outs, 'partials'])}, BLOCK_M: tl.constexpr, "
        "BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):",
        "    tile = tl.program_id(0)",
        f"    pid_b = tl.program_id(1){i64}",
        f"    num_pid_m = tl.cdiv({m}, BLOCK_M)",
        f"    num_pid_n = tl.cdiv({n}, BLOCK_N)",
        *["    " + x for x in tile_coords("tile", i64)],
        f"    row_mask = rm < {m}",
        f"    mask = row_mask & (rn < {n})",
        f"    part = partials + {_partial_offset(spec)}",
        "    acc = tl.load(part, mask=mask, other=0.0)",
        "    for s in tl.static_range(1, SPLIT_K):  # in split order: the same sum every run",
        f"        acc += tl.load(part + s * {batch * m * n}, mask=mask, other=0.0)",
        *epilogue,
    ]


def split_k_launch(spec: KernelSpec) -> tuple[list[str], str, str]:
    """For a SPLIT_K > 1 GEMM: (host lines allocating the partials, after `device` is
    defined), the combine kernel's grid and its launch's arguments."""
    m, n, batch = (int(spec.param(x)) for x in ("m", "n", "batch"))
    split = int(spec.knob("SPLIT_K"))
    scratch = [
        f"    partials = torch.empty({split * batch * m * n}, dtype=torch.float32, device=device)"
    ]
    ins, outs = io_names(spec)
    knobs = ", ".join(f"{k}={spec.knob(k)!r}" for k in ("BLOCK_M", "BLOCK_N", "GROUP_M", "SPLIT_K"))
    args = (
        f"{', '.join([*ins, *outs, 'partials'])}, {knobs}, "
        f"num_warps={spec.knob('num_warps')}, num_stages=1"
    )
    return scratch, f"({_tile_count(spec)}, {batch})", args


def _tile_count(spec: KernelSpec) -> str:
    """The host expression for the number of output tiles of one batch."""
    m, n = spec.param("m"), spec.param("n")
    return f"triton.cdiv({m}, {spec.knob('BLOCK_M')}) * triton.cdiv({n}, {spec.knob('BLOCK_N')})"
