"""The attention template: flash-style forward (online softmax over key blocks), causal or
not, any scale, any strides; writes the output and, when asked, the natural-log logsumexp.

Owns: the Triton kernel. One program owns BLOCK_M query rows of one (batch, head); keys and
values stream through BLOCK_N at a time; scores use exp2 with log2(e) folded into the scale.
Causal programs stop at their last visible key block. fp32 accumulation; fp32 inputs use the
spec's `tl.dot` precision.
Must not: lower aten or launch anything.
"""

from __future__ import annotations

from ..knobs import next_pow2
from ..spec import KernelSpec
from ..spec_view import io_names

LOG2E = 1.4426950408889634


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
        f"        qk = tl.where((rn[None, :] < {sk}){causal}, qk, float('-inf'))",
        "        m_new = tl.maximum(m_i, tl.max(qk, 1))",
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
        "    out = acc / l_i[:, None]",
    ]
    for j, (ref, *_rest) in enumerate(spec.stores):
        shape, stride, dtype = spec.outputs[j]
        if ref == ("A", 0):
            lines.append(
                f"    tl.store(out{j} + b * {stride[0]} + hh * {stride[1]} + rm[:, None] * {stride[2]} + "
                f"rdv[None, :] * {stride[3]}, out.to({in_dtype}), mask=(rm[:, None] < {sq}) & (rdv[None, :] < {dv}))"
            )
        else:
            lines.append(
                f"    tl.store(out{j} + b * {stride[0]} + hh * {stride[1]} + rm * {stride[2]}, "
                f"(m_i + tl.log2(l_i)) * {1.0 / LOG2E!r}, mask=rm < {sq})"
            )
    grid = f"(triton.cdiv({sq}, {spec.knob('BLOCK_M')}), {p['batch'] * h})"
    return "\n".join(lines), grid
