"""Driver: where the tf32x3 form splits its operands. The template (template_tf32x3) once split
both operands in two passes over memory (hi, lo written K-major) before the product kernel; here
each operand is either pre-split that way ("pre") or loaded raw and split in registers inside
the main loop ("reg"), with hi rounded to nearest or truncated. `--tiles`, `--parts`, `--loop`:
the in-register A form's tile, partial sums and loop flags; `--raw-b`: B's pass writes only lo
and the product kernel reads B where it lies as its hi part, which is right only if the tensor
cores truncate float32 operands to TF32 (the check against float64 says whether they do; the
Triton interpreter's dot is exact float32, so there this form is wrong by design). Every
variant's time includes its split passes; each is checked against float64 beside IEEE cuBLAS's
error on the same inputs. Prints a table; writes $OUT/gpu_tf32x3_forms.json.

    OUT=/tmp/out PYTHONPATH=.:docs/gpu_runs/common python docs/gpu_runs/2026-11-26-tf32x3/gpu_tf32x3_forms.py [--sizes 2048 4096]
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
import triton
import triton.language as tl
from grouped_order import grouped_tile
from scripts_common import median_ms
from tf32x3_common import measure, text, write


@triton.jit
def _parts(x, TRUNC: tl.constexpr):
    bits = x.to(tl.int32, bitcast=True)
    if TRUNC:
        hi = (bits & -8192).to(tl.float32, bitcast=True)
    else:
        hi = ((bits + 0x1000) & -8192).to(tl.float32, bitcast=True)
    lo = x - hi
    lo = ((lo.to(tl.int32, bitcast=True) + 0x1000) & -8192).to(tl.float32, bitcast=True)
    return hi, lo


@triton.jit
def _split(
    x_ptr,
    hi_ptr,
    lo_ptr,
    R,
    C,
    sxr,
    sxc,
    shr,
    shc,
    TRUNC: tl.constexpr,
    BLOCK: tl.constexpr,
    LO_ONLY: tl.constexpr = False,
):
    r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))[:, None].to(tl.int64)
    c = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK))[None, :].to(tl.int64)
    mask = (r < R) & (c < C)
    x = tl.load(x_ptr + r * sxr + c * sxc, mask=mask, other=0.0)
    hi, lo = _parts(x, TRUNC)
    if not LO_ONLY:
        tl.store(hi_ptr + r * shr + c * shc, hi, mask=mask)
    tl.store(lo_ptr + r * shr + c * shc, lo, mask=mask)


@triton.jit
def _mm3(a, ah, al, b, bh, bl, c, M, N, K, sam, sak, sbk, sbn,
         A_REG: tl.constexpr, B_REG: tl.constexpr, TRUNC: tl.constexpr,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
         GROUP_M: tl.constexpr, PART_STEPS: tl.constexpr = 1,
         WS: tl.constexpr = False, DAR: tl.constexpr = False,
         B_RAW: tl.constexpr = False):  # fmt: skip
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rk = tl.arange(0, BLOCK_K)
    ram = tl.max_contiguous(
        tl.multiple_of((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M, BLOCK_M), BLOCK_M
    )
    rbn = tl.max_contiguous(
        tl.multiple_of((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N, BLOCK_N), BLOCK_N
    )
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in tl.range(0, K // (BLOCK_K * PART_STEPS), warp_specialize=WS,
                       disallow_acc_multi_buffer=DAR):  # fmt: skip
        # PART_STEPS K steps' products summed on the tensor cores before the rounded add
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in tl.static_range(PART_STEPS):
            k = (kt * PART_STEPS + j) * BLOCK_K + rk
            if A_REG:
                a_h, a_l = _parts(
                    tl.load(a + ram.to(tl.int64)[:, None] * sam + k[None, :] * sak), TRUNC
                )
            else:
                pa = ram.to(tl.int64)[:, None] * K + k[None, :]
                a_h = tl.load(ah + pa)
                a_l = tl.load(al + pa)
            if B_REG:
                b_h, b_l = _parts(
                    tl.load(b + k[:, None] * sbk + rbn.to(tl.int64)[None, :] * sbn), TRUNC
                )
            elif B_RAW:  # B as it lies is its hi part: the tensor cores truncate it to TF32
                pb = rbn.to(tl.int64)[:, None] * K + k[None, :]
                b_h = tl.load(b + k[:, None] * sbk + rbn.to(tl.int64)[None, :] * sbn)
                b_l = tl.trans(tl.load(bl + pb))
            else:
                pb = rbn.to(tl.int64)[:, None] * K + k[None, :]
                b_h = tl.trans(tl.load(bh + pb))
                b_l = tl.trans(tl.load(bl + pb))
            part = tl.dot(a_l, b_h, part, input_precision="tf32")
            part = tl.dot(a_h, b_l, part, input_precision="tf32")
            part = tl.dot(a_h, b_h, part, input_precision="tf32")
        acc += part
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]).to(tl.int64)
    tl.store(c + rm * N + rn, acc, mask=(rm < M) & (rn < N))


def make(
    a: torch.Tensor,
    b: torch.Tensor,
    a_reg: bool,
    b_mode: str,
    trunc: bool,
    stages: int,
    tile: tuple[int, int, int, int] = (128, 128, 32, 8),
    part_steps: int = 1,
    group_m: int = 8,
    ws: bool = False,
    dar: bool = False,
):
    """A callable computing a @ b by the variant (split passes included); tile is BLOCK_M,
    BLOCK_N, BLOCK_K, warps. `b_mode`: "pre" (hi and lo by a pass), "reg" (split in registers)
    or "lo" (only lo by a pass, B read as it lies as hi: hi must then be truncated)."""
    b_reg, b_raw = b_mode == "reg", b_mode == "lo"
    bm, bn, bk, warps = tile
    m, k = a.shape
    n = b.shape[1]
    assert k % 32 == 0

    def run() -> torch.Tensor:
        ah = al = bh = bl = a  # unused placeholders where split in registers
        if not a_reg:
            ah, al = torch.empty(m, k, device=a.device), torch.empty(m, k, device=a.device)
            _split[(triton.cdiv(m, 64), triton.cdiv(k, 64))](
                a, ah, al, m, k, a.stride(0), a.stride(1), k, 1, TRUNC=trunc, BLOCK=64
            )
        if not b_reg:  # B^T, K-major
            bl = torch.empty(n, k, device=a.device)
            bh = bl if b_raw else torch.empty(n, k, device=a.device)
            _split[(triton.cdiv(k, 64), triton.cdiv(n, 64))](
                b,
                bh,
                bl,
                k,
                n,
                b.stride(0),
                b.stride(1),
                1,
                k,
                TRUNC=trunc,
                BLOCK=64,
                LO_ONLY=b_raw,
            )
        c = torch.empty(m, n, device=a.device)
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
        _mm3[grid](a, ah, al, b, bh, bl, c, m, n, k, a.stride(0), a.stride(1), b.stride(0),
                   b.stride(1), A_REG=a_reg, B_REG=b_reg, TRUNC=trunc, BLOCK_M=bm, BLOCK_N=bn,
                   BLOCK_K=bk, GROUP_M=group_m, PART_STEPS=part_steps, WS=ws, DAR=dar, B_RAW=b_raw,
                   num_warps=warps,
                   num_stages=stages)  # fmt: skip
        return c

    return run


# --tiles: the in-register A form (B pre-split) at these (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)
TILES = [
    (128, 128, 32, 8, 3),
    (128, 128, 32, 8, 4),
    (128, 128, 64, 8, 2),
    (128, 128, 64, 8, 3),
    (128, 256, 32, 8, 2),
    (128, 256, 32, 8, 3),
    (256, 128, 32, 8, 2),
    (128, 128, 32, 4, 3),
    (64, 128, 32, 4, 4),
    (128, 64, 32, 4, 4),
]


def variants(
    tiles: bool, parts: bool = False, loop: bool = False, raw_b: bool = False
) -> list[dict]:
    if raw_b:  # B's hi read where B lies (K-major B: x @ W.T), only lo written by the pass
        base = {"a": "reg", "b": "pre", "hi": "trunc", "stages": 3, "tile": [128, 128, 32, 8]}
        return [dict(base), dict(base, b="lo"), dict(base, b="lo", stages=4)]
    if loop:  # the template's form (A in registers, hi truncated): grouping and loop flags
        base = {"a": "reg", "b": "pre", "hi": "trunc", "stages": 3, "tile": [128, 128, 32, 8]}
        return [
            dict(base), dict(base, group_m=4), dict(base, group_m=16), dict(base, group_m=1),
            dict(base, ws=True), dict(base, dar=True), dict(base, stages=2),
        ]  # fmt: skip
    if parts:  # K steps per tensor-core partial sum, the template's form and tile
        return [
            {"a": "reg", "b": "pre", "hi": "round", "stages": st, "tile": [128, 128, 32, 8],
             "part_steps": ps}
            for ps in (1, 2, 4) for st in (3, 4)
        ]  # fmt: skip
    if tiles:
        return [
            {"a": "reg", "b": "pre", "hi": hi, "stages": t[4], "tile": list(t[:4])}
            for t in TILES
            for hi in ("round", "trunc")
        ]
    return [
        {"a": a, "b": b, "hi": hi, "stages": s, "tile": [128, 128, 32, 8]}
        for a, b, hi, s in itertools.product(
            ("pre", "reg"), ("pre", "reg"), ("round", "trunc"), (3, 4)
        )
    ]


def run_case(
    n: int,
    layout: str,
    tiles: bool = False,
    parts: bool = False,
    loop: bool = False,
    raw_b: bool = False,
) -> dict:
    torch.manual_seed(0)
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    if layout == "linear":  # B = W^T of an nn.Linear weight: K-major
        b = torch.randn(n, n, device="cuda").t()
    torch.backends.cuda.matmul.allow_tf32 = False
    exact = a.double() @ b.double()
    ieee = a @ b
    row: dict = {"n": n, "layout": layout, "ieee_ms": median_ms(lambda: a @ b)}
    row["ieee_error"] = (ieee.double() - exact).abs().max().item()
    row["variants"] = []
    bh, bl = torch.empty(n, n, device="cuda"), torch.empty(n, n, device="cuda")
    split = (triton.cdiv(n, 64), triton.cdiv(n, 64))
    row["b_split_ms"] = median_ms(
        lambda: _split[split](
            b, bh, bl, n, n, b.stride(0), b.stride(1), 1, n, TRUNC=False, BLOCK=64
        )
    )
    for v in variants(tiles, parts, loop, raw_b):
        row["variants"].append(v)
        measure(v, lambda v=v: make(a, b, v["a"] == "reg", v["b"], v["hi"] == "trunc",
                                    v["stages"], tuple(v["tile"]), v.get("part_steps", 1),
                                    v.get("group_m", 8), v.get("ws", False), v.get("dar", False)),
                exact, row)  # fmt: skip
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--tiles", action="store_true", help="tiles of the in-register A form")
    p.add_argument("--parts", action="store_true", help="K steps per partial sum")
    p.add_argument("--loop", action="store_true", help="grouping and loop flags")
    p.add_argument("--raw-b", action="store_true", help="B read as it lies as its hi part")
    p.add_argument("--layouts", nargs="+", default=["mm", "linear"])
    a = p.parse_args(argv)
    rows = [
        run_case(n, lay, a.tiles, a.parts, a.loop, a.raw_b) for n in a.sizes for lay in a.layouts
    ]
    write("gpu_tf32x3_forms", rows)
    for row in rows:
        print(
            f"{row['n']}^3 {row['layout']}  IEEE {row['ieee_ms']:.4f} ms  error {row['ieee_error']:.2e}"
            f"  B split pass alone {row['b_split_ms']:.4f} ms"
        )
        for v in row["variants"]:
            tile = "x".join(map(str, v["tile"][:3])) + f" w{v['tile'][3]}"
            name = f"A {v['a']} B {v['b']} hi {v['hi']} {tile} s{v['stages']} p{v.get('part_steps', 1)}"
            name += (
                f" g{v.get('group_m', 8)}"
                + " ws" * v.get("ws", False)
                + " dar" * v.get("dar", False)
            )
            print(f"   {name:34s} {text(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
