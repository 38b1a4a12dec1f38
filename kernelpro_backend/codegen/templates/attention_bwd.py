"""The attention backward template: flash-attention-2 style, several launches.

Owns: the Triton kernels and the launch plan (scratch buffers, kernel names, grids and
arguments), all from the spec's anchor (strides in [B, H, S, D] order, see
lower_attention_bwd). Launches, in order:
  1. `attn_bwd_preprocess`: delta = rowsum(dO * O) per query row, fp32, into scratch.
  2. `attn_bwd_dkdv`: one program per BLOCK_N keys of one (batch, head) keeps K, V, dK, dV on
     chip and steps over BLOCK_M query rows (causal programs start at their first visible
     row): P^T = exp(scale K Q^T - lse), dV += P^T dO, dS^T = P^T (V dO^T - delta),
     dK += dS^T Q. With DQ="atomic" it also adds scale dS K into an fp32 dQ scratch.
  3. `attn_bwd_dq` (DQ="kernel"): one program per BLOCK_M_DQ query rows steps over
     BLOCK_N_DQ keys and recomputes P; or `attn_bwd_dq_convert` (DQ="atomic") casts the
     scratch into grad_q's dtype and strides.
P is recomputed from the saved natural-log logsumexp (exp2 with log2(e) folded in); fp32
accumulation; P and dS are cast to the operand dtype before their matmuls (as FA2 does).
An additive bias (anchor "bias") joins the recomputed scores in both kernels; its gradient
(grads entry 3, [B, H, Sq, Sk]) is dS itself, stored in fp32-rounded output dtype by the dK/dV
programs, which then visit every query block (causal ones too: they write the masked zeros).
Must not: lower aten or run anything.
"""

from __future__ import annotations

from ..knobs import next_pow2
from ..spec import KernelSpec

LOG2E = 1.4426950408889634
_TL = {"float32": "tl.float32", "bfloat16": "tl.bfloat16", "float16": "tl.float16"}
Launch = tuple[str, str, str]  # (kernel name, grid expression, argument text)


class _Text:
    """The anchor's constants and the index expressions shared by the four kernels."""

    def __init__(self, spec: KernelSpec) -> None:
        p = dict(spec.anchor)
        self.p = p
        self.bd, self.bdv = max(16, next_pow2(p["head_dim"])), max(16, next_pow2(p["value_dim"]))
        self.dtype = _TL[p["operand_dtype"]]
        fp32 = p["operand_dtype"] == "float32"
        self.dot_kw = f', input_precision="{spec.precision}"' if fp32 else ""
        self.qk_scale = repr(p["scale"] * LOG2E)
        self.causal = p["causal"]
        self.offset = p["causal_offset"]
        self.bias = p.get("bias")
        self.grad_bias = next((s for w, s in p["grads"] if w == 3), None)

    def bias_params(self) -> str:
        return ", BIAS, DB_OUT" if self.bias is not None else ""

    def scores(self, var: str, dot: str, rows: str, t: bool, indent: str) -> list[str]:
        """`var` = the scores in log2 units less the row's logsumexp: dot(...) * scale, plus
        the bias tile (transposed when t: keys down, queries across), minus lse."""
        lse = "lse[None, :]" if t else "lse[:, None]"
        lines = [f"{indent}{var} = {dot} * {self.qk_scale} - {lse} * {LOG2E!r}"]
        if self.bias is None:
            return lines
        _, offset, bs = self.bias
        m, n = ("rm[None, :]", "rn[:, None]") if t else ("rm[:, None]", "rn[None, :]")
        ptrs = f"BIAS + {offset} + b * {bs[0]} + hh * {bs[1]} + {m} * {bs[2]} + {n} * {bs[3]}"
        valid = f"({m} < {self.p['seq_q']}) & ({n} < {self.p['seq_k']})"
        return [
            f"{indent}bias = tl.load({ptrs}, mask={valid}, other=0.0).to(tl.float32)",
            *lines,
            f"{indent}{var} = {var} + bias * {LOG2E!r}",
        ]

    def tile(self, name: str, strides: tuple, rows: str, cols: str, t: bool = False) -> str:
        """Pointers of a [rows, cols] tile ([cols, rows] when t) of a [B,H,S,D] tensor."""
        r, c = ("[None, :]", "[:, None]") if t else ("[:, None]", "[None, :]")
        s = strides
        return f"{name} + b * {s[0]} + hh * {s[1]} + {rows}{r} * {s[2]} + {cols}{c} * {s[3]}"

    def mask(self, rows: str, n_rows: int, cols: str, n_cols: int, t: bool = False) -> str:
        r, c = ("[None, :]", "[:, None]") if t else ("[:, None]", "[None, :]")
        return f"({rows}{r} < {n_rows}) & ({cols}{c} < {n_cols})"

    def operand(self, var: str, role: str, rows: str, seq: int, t: bool = False) -> list[str]:
        """Load Q/K/V/O/dO (`role`) as `var`, widened under the interpreter."""
        _, offset, strides = self.p[role]
        width, cols = (
            (self.p["head_dim"], "rd") if role in ("q", "k") else (self.p["value_dim"], "rdv")
        )
        param = {"q": "Q", "k": "K", "v": "V", "out": "O", "grad_out": "DO"}[role]
        ptrs = self.tile(f"{param} + {offset}", strides, rows, cols, t)
        return [
            f"    {var} = tl.load({ptrs}, mask={self.mask(rows, seq, cols, width, t)}, other=0.0)",
            "    if INTERPRET:  # the CPU interpreter multiplies bf16/fp16 wrongly; widen there",
            f"        {var} = {var}.to(tl.float32)",
        ]

    def prologue(self, block: str, rows: str) -> list[str]:
        return [
            "    pid = tl.program_id(0)",
            "    bh = tl.program_id(1)",
            f"    b = (bh // {self.p['heads']}).to(tl.int64)",
            f"    hh = (bh % {self.p['heads']}).to(tl.int64)",
            f"    {rows} = pid * {block} + tl.arange(0, {block})",
            f"    rd = tl.arange(0, {self.bd})",
            f"    rdv = tl.arange(0, {self.bdv})",
        ]

    def row_stats(self, rows: str, indent: str = "    ") -> list[str]:
        li, lo, ls = self.p["lse"]
        sq = self.p["seq_q"]
        guard = (  # a fully masked row (lse -inf) has P = 0, not exp2(-inf + inf)
            [f"{indent}lse = tl.where(lse == float('-inf'), float('inf'), lse)"]
            if self.bias is not None
            else []
        )
        return [
            f"{indent}lse = tl.load(LSE + {lo} + b * {ls[0]} + hh * {ls[1]} + {rows} * {ls[2]}, mask={rows} < {sq}, other=0.0)",
            *guard,
            f"{indent}delta = tl.load(DELTA + bh.to(tl.int64) * {sq} + {rows}, mask={rows} < {sq}, other=0.0)",
        ]

    def cast(self, expr: str, var: str, indent: str) -> list[str]:
        return [
            f"{indent}{var} = ({expr}).to({self.dtype})",
            f"{indent}if INTERPRET:",
            f"{indent}    {var} = {var}.to(tl.float32)",
        ]

    def visible(self, m: str, n: str) -> str:
        """Key n visible to query m (both index vectors with their broadcast suffix)."""
        keep = f"({m} < {self.p['seq_q']}) & ({n} < {self.p['seq_k']})"
        return keep + (f" & ({n} <= {m} + {self.offset})" if self.causal else "")

    def store(self, spec: KernelSpec, which: int, acc: str, rows: str, seq: int) -> list[str]:
        for j, (w, strides) in enumerate(self.p["grads"]):
            if w == which:
                width, cols = (
                    (self.p["value_dim"], "rdv") if which == 2 else (self.p["head_dim"], "rd")
                )
                dt = _TL[spec.outputs[j][2]]
                ptrs = self.tile(("DQ_OUT", "DK_OUT", "DV_OUT")[which], strides, rows, cols)
                return [
                    f"    tl.store({ptrs}, {acc}.to({dt}), mask={self.mask(rows, seq, cols, width)})"
                ]
        return []


def _preprocess(x: _Text) -> str:
    sq = x.p["seq_q"]
    lines = [
        "@triton.jit",
        "def attn_bwd_preprocess(O, DO, DELTA, BLOCK_M: tl.constexpr, INTERPRET: tl.constexpr):",
        *x.prologue("BLOCK_M", "rm"),
        *x.operand("o", "out", "rm", sq),
        *x.operand("do", "grad_out", "rm", sq),
        "    rowsum = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)",
        f"    tl.store(DELTA + bh.to(tl.int64) * {sq} + rm, rowsum, mask=rm < {sq})",
    ]
    return "\n".join(lines)


def _dkdv(spec: KernelSpec, x: _Text, has_dk: bool, has_dv: bool, atomic: bool) -> str:
    p, kw = x.p, x.dot_kw
    sq, sk, d = p["seq_q"], p["seq_k"], p["head_dim"]
    skip = x.causal and x.grad_bias is None  # dB's masked zeros are written, not skipped
    lo = f"tl.maximum(pid * BLOCK_N - {x.offset}, 0) // BLOCK_M * BLOCK_M" if skip else "0"
    lines = [
        "@triton.jit",
        f"def attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DQ_OUT, DK_OUT, DV_OUT, DQ_ACC{x.bias_params()}, BLOCK_M: tl.constexpr, "
        "BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):",
        *x.prologue("BLOCK_N", "rn"),
        *x.operand("k", "k", "rn", sk),
        *x.operand("v", "v", "rn", sk),
        f"    dk = tl.zeros([BLOCK_N, {x.bd}], tl.float32)",
        f"    dv = tl.zeros([BLOCK_N, {x.bdv}], tl.float32)",
        f"    for start_m in range({lo}, {sq}, BLOCK_M):",
        "        rm = start_m + tl.arange(0, BLOCK_M)",
        *("    " + s for s in x.operand("q_t", "q", "rm", sq, t=True)),
        *("    " + s for s in x.operand("do", "grad_out", "rm", sq)),
        *x.row_stats("rm", "        "),
        *x.scores("s_t", f"tl.dot(k, q_t{kw})", "rm", True, "        "),
        f"        p_t = tl.where({x.visible('rm[None, :]', 'rn[:, None]')}, tl.exp2(s_t), 0.0)",
    ]
    if has_dv:
        lines += [*x.cast("p_t", "p_c", "        "), f"        dv += tl.dot(p_c, do{kw})"]
    lines.append(f"        dp_t = tl.dot(v, tl.trans(do){kw})")
    if x.grad_bias is None:
        lines += x.cast("p_t * (dp_t - delta[None, :])", "ds_c", "        ")
    else:
        _, _, dt = spec.outputs[[w for w, _ in p["grads"]].index(3)]
        gs = x.grad_bias
        lines += [
            "        ds_t = p_t * (dp_t - delta[None, :])",
            f"        tl.store(DB_OUT + b * {gs[0]} + hh * {gs[1]} + rm[None, :] * {gs[2]} + "
            f"rn[:, None] * {gs[3]}, ds_t.to({_TL[dt]}), mask={x.mask('rn', sk, 'rm', sq)})",
            *x.cast("ds_t", "ds_c", "        "),
        ]
    if has_dk:
        lines.append(f"        dk += tl.dot(ds_c, tl.trans(q_t){kw})")
    if atomic:
        lines += [
            f"        dq_part = tl.dot(tl.trans(ds_c), k{kw}) * {p['scale']!r}",
            f"        dq_ptrs = DQ_ACC + bh.to(tl.int64) * {sq * d} + rm[:, None] * {d} + rd[None, :]",
            f"        tl.atomic_add(dq_ptrs, dq_part, mask={x.mask('rm', sq, 'rd', d)})",
        ]
    lines += x.store(spec, 1, f"(dk * {p['scale']!r})", "rn", sk)
    lines += x.store(spec, 2, "dv", "rn", sk)
    return "\n".join(lines)


def _dq(spec: KernelSpec, x: _Text) -> str:
    p, kw = x.p, x.dot_kw
    sq, sk = p["seq_q"], p["seq_k"]
    hi = f"tl.minimum({sk}, (pid + 1) * BLOCK_M + {x.offset})" if x.causal else f"{sk}"
    lines = [
        "@triton.jit",
        f"def attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ_OUT, DK_OUT, DV_OUT{x.bias_params()}, BLOCK_M: tl.constexpr, "
        "BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):",
        *x.prologue("BLOCK_M", "rm"),
        *x.operand("q", "q", "rm", sq),
        *x.operand("do", "grad_out", "rm", sq),
        *x.row_stats("rm"),
        f"    dq = tl.zeros([BLOCK_M, {x.bd}], tl.float32)",
        f"    for start_n in range(0, {hi}, BLOCK_N):",
        "        rn = start_n + tl.arange(0, BLOCK_N)",
        *("    " + s for s in x.operand("k_t", "k", "rn", sk, t=True)),
        *("    " + s for s in x.operand("v_t", "v", "rn", sk, t=True)),
        *x.scores("s", f"tl.dot(q, k_t{kw})", "rm", False, "        "),
        f"        p = tl.where({x.visible('rm[:, None]', 'rn[None, :]')}, tl.exp2(s), 0.0)",
        f"        dp = tl.dot(do, v_t{kw})",
        *x.cast("p * (dp - delta[:, None])", "ds_c", "        "),
        f"        dq += tl.dot(ds_c, tl.trans(k_t){kw})",
        *x.store(spec, 0, f"(dq * {p['scale']!r})", "rm", sq),
    ]
    return "\n".join(lines)


def _dq_convert(spec: KernelSpec, x: _Text) -> str:
    sq, d = x.p["seq_q"], x.p["head_dim"]
    lines = [
        "@triton.jit",
        "def attn_bwd_dq_convert(DQ_ACC, DQ_OUT, DK_OUT, DV_OUT, BLOCK_M: tl.constexpr):",
        *x.prologue("BLOCK_M", "rm"),
        f"    acc_ptrs = DQ_ACC + bh.to(tl.int64) * {sq * d} + rm[:, None] * {d} + rd[None, :]",
        f"    acc = tl.load(acc_ptrs, mask={x.mask('rm', sq, 'rd', d)}, other=0.0)",
        *x.store(spec, 0, "acc", "rm", sq),
    ]
    return "\n".join(lines)


def render_attention_backward(spec: KernelSpec) -> tuple[str, list[str], list[Launch]]:
    """(kernel source, host lines allocating scratch, launches in order)."""
    x = _Text(spec)
    p = x.p
    which = {w for w, _ in p["grads"]}
    atomic = spec.knob("DQ") == "atomic"
    bh, sq, sk = p["batch"] * p["heads"], p["seq_q"], p["seq_k"]
    ops = {r: f"in{p[r][0]}" for r in ("q", "k", "v", "out", "grad_out")}
    ops["lse"] = f"in{p['lse'][0]}"
    # grad_q, grad_k, grad_v buffers (None where the subgraph does not output that gradient)
    outs = ["None"] * 4  # grad_q, grad_k, grad_v, grad_bias
    for j, (w, _) in enumerate(p["grads"]):
        outs[w] = f"out{j}"
    warps = f"num_warps={spec.knob('num_warps')}, num_stages={spec.knob('num_stages')}"
    common = f"{ops['q']}, {ops['k']}, {ops['v']}, {ops['grad_out']}, {ops['lse']}, delta, {', '.join(outs[:3])}"
    biased = f", in{p['bias'][0]}, {outs[3]}" if x.bias is not None else ""
    bm_dq, bn_dq = spec.knob("BLOCK_M_DQ"), spec.knob("BLOCK_N_DQ")
    rows_grid = f"(triton.cdiv({sq}, {bm_dq}), {bh})"
    scratch = [f"    delta = torch.empty({bh * sq}, dtype=torch.float32, device=device)"]
    kernels = [_preprocess(x)]
    launches: list[Launch] = [
        (
            "attn_bwd_preprocess",
            rows_grid,
            f"{ops['out']}, {ops['grad_out']}, delta, BLOCK_M={bm_dq}, INTERPRET=INTERPRET, {warps}",
        )
    ]
    if atomic:
        scratch.append(
            f"    dq_acc = torch.zeros({bh * sq * p['head_dim']}, dtype=torch.float32, device=device)"
        )
    if which & {1, 2, 3} or atomic:
        kernels.append(_dkdv(spec, x, 1 in which, 2 in which, atomic))
        launches.append(
            (
                "attn_bwd_dkdv",
                f"(triton.cdiv({sk}, {spec.knob('BLOCK_N')}), {bh})",
                f"{common}, {'dq_acc' if atomic else 'None'}{biased}, BLOCK_M={spec.knob('BLOCK_M')}, "
                f"BLOCK_N={spec.knob('BLOCK_N')}, INTERPRET=INTERPRET, {warps}",
            )
        )
    if 0 in which and atomic:
        kernels.append(_dq_convert(spec, x))
        launches.append(
            (
                "attn_bwd_dq_convert",
                rows_grid,
                f"dq_acc, {', '.join(outs[:3])}, BLOCK_M={bm_dq}, {warps}",
            )
        )
    elif 0 in which:
        kernels.append(_dq(spec, x))
        launches.append(
            (
                "attn_bwd_dq",
                rows_grid,
                f"{common}{biased}, BLOCK_M={bm_dq}, BLOCK_N={bn_dq}, INTERPRET=INTERPRET, {warps}",
            )
        )
    return "\n\n\n".join(kernels), scratch, launches
