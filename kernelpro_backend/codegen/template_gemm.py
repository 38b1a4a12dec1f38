"""The GEMM template: mm / addmm / bmm / baddbmm with the fused epilogue applied to the
accumulator tile, and row reductions when the row fits one tile (BLOCK_N >= N).

Owns: the Triton kernel - grouped (GROUP_M) tile order, optional persistent tile loop,
optional split-K with atomic accumulation, operands read through strides (a transposed weight
is just other strides), fp32 accumulation, `tl.dot` input precision from the spec
(float32 stays "ieee" unless the spec says tf32 / tf32x3).
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from .emitter import Emitter
from .spec import KernelSpec


def render_gemm(spec: KernelSpec) -> tuple[str, str]:
    m, n, k, batch = (spec.param(x) for x in ("m", "n", "k", "batch"))
    a_in, a_off, (sab, sam, sak) = spec.param("a")
    b_in, b_off, (sbb, sbk, sbn) = spec.param("b")
    batched = len(spec.domain) == 3
    coords = ["pid_b", "rm", "rn"] if batched else ["rm", "rn"]
    em = Emitter(spec, coords, [len(spec.domain) - 1], n, row_var="rm")
    split = int(spec.knob("SPLIT_K"))
    persistent = bool(spec.knob("PERSISTENT"))
    wide = max(m * sam, k * sak, n * sbn, k * sbk, batch * max(sab, sbb), m * n * batch) > 2**30
    params = [f"in{i}" for i in range(len(spec.inputs))] + [
        f"out{i}" for i in range(len(spec.outputs))
    ]
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
    pad = "    "
    if persistent:
        lines.append("    for tile in range(pid, num_pid_m * num_pid_n, tl.num_programs(0)):")
        pad = "        "
    else:
        lines.append("    tile = pid")
    precision = {"ieee": "ieee", "tf32": "tf32", "tf32x3": "tf32x3"}[spec.precision]
    dot_kw = f', input_precision="{precision}"' if spec.param("operand_dtype") == "float32" else ""
    i64 = ".to(tl.int64)" if wide else ""
    body = [
        "# grouped order: GROUP_M row-tiles share each column of B while it is in L2",
        "group = tile // (GROUP_M * num_pid_n)",
        "first_m = group * GROUP_M",
        "group_m = tl.minimum(num_pid_m - first_m, GROUP_M)",
        "pid_m = first_m + (tile % (GROUP_M * num_pid_n)) % group_m",
        "pid_n = (tile % (GROUP_M * num_pid_n)) // group_m",
        f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]){i64}",
        f"rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]){i64}",
        "rk = tl.arange(0, BLOCK_K)",
        f"a_ptrs = in{a_in} + {a_off} + pid_b * {sab} + rm * {sam} + rk[None, :] * {sak}",
        f"b_ptrs = in{b_in} + {b_off} + pid_b * {sbb} + rk[:, None] * {sbk} + rn * {sbn}",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"for kt in range(pid_k, tl.cdiv({k}, BLOCK_K), SPLIT_K):",
        "    k0 = kt * BLOCK_K",
        f"    a = tl.load(a_ptrs + k0 * {sak}, mask=(rm < {m}) & (rk[None, :] + k0 < {k}), other=0.0)",
        f"    b = tl.load(b_ptrs + k0 * {sbk}, mask=(rk[:, None] + k0 < {k}) & (rn < {n}), other=0.0)",
        *(
            [
                "    if INTERPRET:  # the CPU interpreter multiplies bf16/fp16 wrongly; widen there",
                "        a = a.to(tl.float32)",
                "        b = b.to(tl.float32)",
            ]
            if not dot_kw
            else []
        ),
        f"    acc = tl.dot(a, b, acc{dot_kw})",
        f"row_mask = rm < {m}",
        f"mask = row_mask & (rn < {n})",
    ]
    em.indent = len(pad) // 4
    em.local_memo[("A", 0)] = "acc"
    if split > 1:
        _, off, index, _ = spec.stores[0]
        from . import index as ix

        em.line(f"tl.atomic_add(out0 + {off} + {ix.render(index, coords)}, acc, mask=mask)")
    else:
        for j in range(len(spec.stores)):
            em.store(j, f"out{j}")
    lines += [pad + b for b in body] + em.lines
    tiles = f"triton.cdiv({m}, {spec.knob('BLOCK_M')}) * triton.cdiv({n}, {spec.knob('BLOCK_N')})"
    grid = (
        f"(min({tiles}, num_sms), {batch}, {split})"
        if persistent
        else f"({tiles}, {batch}, {split})"
    )
    return "\n".join(lines), grid
