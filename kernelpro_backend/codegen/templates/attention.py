"""The attention template: flash-style forward (online softmax over key blocks), causal or
not, any scale, any strides, an optional additive bias (read per score, broadcast by zero
strides); writes the output and, when asked, the natural-log logsumexp.

Owns: the Triton kernel. One program owns BLOCK_M query rows of one (batch, head); keys and
values stream through BLOCK_N at a time; scores use exp2 with log2(e) folded into the scale.
Causal programs stop at their last visible key block. fp32 accumulation; fp32 inputs use the
spec's `tl.dot` precision. With a bias, a row whose every score is -inf (a fully masked query)
writes output 0 and logsumexp 0, as the efficient op does. The efficient op's logsumexp has
its rows padded to a multiple of 32 (anchor "lse_rows"), +inf past Sq: programs cover them.
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from ..knobs import next_pow2
from ..spec import KernelSpec
from ..spec_view import io_names

LOG2E = 1.4426950408889634


def _bias_lines(p: dict) -> list[str]:
    """Add the bias tile (in log2 units) to the scaled scores `qk` of rows rm, keys rn."""
    if p.get("bias") is None:
        return []
    bi, bo, bs = p["bias"]
    ptrs = (
        f"in{bi} + {bo} + b.to(tl.int64) * {bs[0]} + hh.to(tl.int64) * {bs[1]} + "
        f"rm[:, None] * {bs[2]} + rn[None, :] * {bs[3]}"
    )
    valid = f"(rm[:, None] < {p['seq_q']}) & (rn[None, :] < {p['seq_k']})"
    return [
        f"        bias = tl.load({ptrs}, mask={valid}, other=0.0).to(tl.float32)",
        f"        qk = qk + bias * {LOG2E!r}",
    ]


def _finish(p: dict) -> list[str]:
    """out = acc / l; with a bias, a fully masked row (l = 0) gets out 0 and logsumexp 0, as
    the efficient op writes it."""
    if p.get("bias") is None:
        return ["    out = acc / l_i[:, None]"]
    return [
        "    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]",
        "    m_i = tl.where(l_i == 0.0, 0.0, m_i)",
        "    l_i = tl.where(l_i == 0.0, 1.0, l_i)",
    ]


def render_attention(spec: KernelSpec) -> tuple[str, str]:
    p = dict(spec.anchor)
    (qi, qo, qs), (ki, ko, ks), (vi, vo, vs) = p["q"], p["k"], p["v"]
    h, sq, sk, d, dv = p["heads"], p["seq_q"], p["seq_k"], p["head_dim"], p["value_dim"]
    bd, bdv = max(16, next_pow2(d)), max(16, next_pow2(dv))
    fp32 = p["operand_dtype"] == "float32"
    dot_kw = f', input_precision="{spec.precision}"' if fp32 else ""
    in_dtype = {"float32": "tl.float32", "bfloat16": "tl.bfloat16", "float16": "tl.float16"}[
        p["operand_dtype"]
    ]
    params = [name for names in io_names(spec) for name in names]
    hi = f"tl.minimum({sk}, (pid_m + 1) * BLOCK_M)" if p["causal"] else f"{sk}"
    causal = " & (rn[None, :] <= rm[:, None])" if p["causal"] else ""
    lines = [
        "@triton.jit",
        f"def kernel({', '.join(params)}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr):",
        "    pid_m = tl.program_id(0)",
        "    bh = tl.program_id(1)",
        f"    b = bh // {h}",
        f"    hh = bh % {h}",
        "    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        f"    rd = tl.arange(0, {bd})",
        f"    rdv = tl.arange(0, {bdv})",
        f"    q_ptrs = in{qi} + {qo} + b * {qs[0]} + hh * {qs[1]} + rm[:, None] * {qs[2]} + rd[None, :] * {qs[3]}",
        f"    q = tl.load(q_ptrs, mask=(rm[:, None] < {sq}) & (rd[None, :] < {d}), other=0.0)",
        "    if INTERPRET:  # the CPU interpreter multiplies bf16/fp16 wrongly; widen there",
        "        q = q.to(tl.float32)",
        "    m_i = tl.full([BLOCK_M], float('-inf'), tl.float32)",
        "    l_i = tl.zeros([BLOCK_M], tl.float32)",
        f"    acc = tl.zeros([BLOCK_M, {bdv}], tl.float32)",
        f"    qk_scale = {p['scale'] * LOG2E!r}  # softmax scale times log2(e): exp2 instead of exp",
        f"    for start_n in range(0, {hi}, BLOCK_N):",
        "        rn = start_n + tl.arange(0, BLOCK_N)",
        f"        k_ptrs = in{ki} + {ko} + b * {ks[0]} + hh * {ks[1]} + rn[None, :] * {ks[2]} + rd[:, None] * {ks[3]}",
        f"        k = tl.load(k_ptrs, mask=(rn[None, :] < {sk}) & (rd[:, None] < {d}), other=0.0)",
        "        if INTERPRET:",
        "            k = k.to(tl.float32)",
        f"        qk = tl.dot(q, k{dot_kw}) * qk_scale",
        *_bias_lines(p),
        f"        qk = tl.where((rn[None, :] < {sk}){causal}, qk, float('-inf'))",
        "        m_new = tl.maximum(m_i, tl.max(qk, 1))",
        *(
            ["        m_new = tl.where(m_new == float('-inf'), -1e30, m_new)"]
            if p.get("bias") is not None
            else []
        ),
        "        alpha = tl.exp2(m_i - m_new)",
        "        prob = tl.exp2(qk - m_new[:, None])",
        "        l_i = l_i * alpha + tl.sum(prob, 1)",
        f"        v_ptrs = in{vi} + {vo} + b * {vs[0]} + hh * {vs[1]} + rn[:, None] * {vs[2]} + rdv[None, :] * {vs[3]}",
        f"        v = tl.load(v_ptrs, mask=(rn[:, None] < {sk}) & (rdv[None, :] < {dv}), other=0.0)",
        f"        pv = prob.to({in_dtype})",
        "        if INTERPRET:",
        "            k = k.to(tl.float32)",
        "            v = v.to(tl.float32)",
        "            pv = pv.to(tl.float32)",
        f"        acc = acc * alpha[:, None] + tl.dot(pv, v{dot_kw})",
        "        m_i = m_new",
        *_finish(p),
    ]
    lse_rows = p.get("lse_rows", sq)
    for j, (ref, *_rest) in enumerate(spec.stores):
        shape, stride, dtype = spec.outputs[j]
        if ref == ("A", 0):
            lines.append(
                f"    tl.store(out{j} + b * {stride[0]} + hh * {stride[1]} + rm[:, None] * {stride[2]} + "
                f"rdv[None, :] * {stride[3]}, out.to({in_dtype}), mask=(rm[:, None] < {sq}) & (rdv[None, :] < {dv}))"
            )
        else:
            lse = f"(m_i + tl.log2(l_i)) * {1.0 / LOG2E!r}"
            if lse_rows != sq:  # rows past Sq up to the padded length: +inf
                lse = f"tl.where(rm < {sq}, {lse}, float('inf'))"
            lines.append(
                f"    tl.store(out{j} + b * {stride[0]} + hh * {stride[1]} + rm * {stride[2]}, "
                f"{lse}, mask=rm < {lse_rows})"
            )
    grid = f"(triton.cdiv({max(sq, lse_rows)}, {spec.knob('BLOCK_M')}), {p['batch'] * h})"
    return "\n".join(lines), grid
