"""The attention templates' knob legality: shared memory and registers per program.

Owns: `validate_attention(spec, knobs)` and `validate_attention_backward(spec, knobs)`, which
raise `IllegalSpec` naming the values, the limit and what to change (knobs.validate calls them).
Must not: import spec.py or define the knob spaces (knobs.py does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .domain import next_pow2
from .errors import IllegalSpec

if TYPE_CHECKING:
    from .spec_view import SpecView

SMEM_BYTES = 227 * 1024  # shared memory one H100 program may hold


def validate_attention(spec: SpecView, k: dict) -> None:
    d = next_pow2(max(spec.param("head_dim"), spec.param("value_dim")))
    bytes_ = 2 if spec.param("operand_dtype") != "float32" else 4
    smem = (k["BLOCK_M"] * d + 2 * k["BLOCK_N"] * d) * bytes_ * k["num_stages"]
    if smem > SMEM_BYTES:
        raise IllegalSpec(
            f"BLOCK_M={k['BLOCK_M']}, BLOCK_N={k['BLOCK_N']}, head dim {d}, num_stages="
            f"{k['num_stages']} need {smem} bytes of shared memory; the limit is {SMEM_BYTES}. "
            "Reduce BLOCK_N or num_stages"
        )


def validate_attention_backward(spec: SpecView, k: dict) -> None:
    d = max(16, next_pow2(spec.param("head_dim"))) + max(16, next_pow2(spec.param("value_dim")))
    bytes_ = 2 if spec.param("operand_dtype") != "float32" else 4
    stages = k["num_stages"]
    for resident, streamed, names in (
        (k["BLOCK_N"], k["BLOCK_M"], "BLOCK_N (resident K, V) and BLOCK_M (streamed Q, dO)"),
        (k["BLOCK_M_DQ"], k["BLOCK_N_DQ"], "BLOCK_M_DQ (resident Q, dO) and BLOCK_N_DQ"),
    ):
        smem = (resident + streamed * stages) * d * bytes_
        if smem > SMEM_BYTES:
            raise IllegalSpec(
                f"{names} = {resident}, {streamed} with head dims {d} in total and num_stages="
                f"{stages} need {smem} bytes of shared memory; the limit is {SMEM_BYTES}. "
                "Reduce the blocks or num_stages"
            )
    regs = k["BLOCK_N"] * d // (32 * k["num_warps"])
    if regs > 256:
        raise IllegalSpec(
            f"dK and dV accumulators of {k['BLOCK_N']} keys x {d} columns over {k['num_warps']} "
            f"warps are {regs} fp32 registers per thread; the limit is 255. Use more warps or "
            "a smaller BLOCK_N"
        )
    has_dq = any(which == 0 for which, _ in spec.param("grads"))
    if k["DQ"] == "atomic" and not has_dq:
        raise IllegalSpec("DQ='atomic' but the subgraph does not output grad_q; use DQ='kernel'")
