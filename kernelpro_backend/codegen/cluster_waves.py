"""The reductions of a row-resident CUDA kernel (templates/cluster.py): one wave at a time.

Owns: `reduce_wave` (fold a wave of reductions over a thread's values, then warp -> block ->
cluster, with a softmax's max and sum of exp as one (max, sum) exchange under ONLINE=pair) and
`pair_wave` (which pairs a wave may fold together). Both take the kernel body being emitted
(templates/cluster._Body: its lines, memos and loops) as their first argument.
Must not: decide legality (cluster_rules.py) or emit loads and stores (templates/cluster.py).
"""

from __future__ import annotations

from typing import Any

from .program_walk import online_pairs, reduction_ready

FUNCTOR = {"sum": "KpSum", "max": "KpMax", "min": "KpMin", "gather": "KpBits"}
IDENTITY = {
    "sum": "0.0f",
    "max": "__int_as_float(0xff800000)",
    "min": "__int_as_float(0x7f800000)",
    "gather": "0.0f",
}


def reduce_wave(
    body: Any, wave: list[int], slots: dict[int, int], paired: dict[int, int] | None = None
) -> None:
    """Fold `wave`'s reductions over this thread's values, then warp -> block -> cluster.
    `paired` (max -> sum of exp(y - max), both in `wave`): the sum is folded in a second
    register pass against the thread's own max, and each pair crosses the cluster as one
    (max, sum) exchange: one barrier where two waves take two."""
    paired = paired or {}
    partners = set(paired.values())
    for i in wave:
        body.line(f"float a{i} = {IDENTITY[body.spec.ops[i][0]]};")

    def fold(ops: list[int]) -> None:
        for i in ops:
            op, args, _ = body.spec.ops[i]
            term = body.value(args[0])
            if op == "gather":
                term = f"(col == {body.value(args[1])} ? {term} : 0.0f)"
            body.line(f"a{i} = {FUNCTOR[op]}()(a{i}, {term});")

    body.open_vectors()
    body.element_block(lambda: fold([i for i in wave if i not in partners]))
    body.close(2)
    if paired:
        for m in paired:  # exp(y - max) against the thread's max; none at all: 0
            body.line(f"const float b{m} = (a{m} == {IDENTITY['max']}) ? 0.0f : a{m};")
            body.row_memo[("T", m)] = f"b{m}"
        body.open_vectors()
        body.element_block(lambda: fold(sorted(partners)))
        body.close(2)
        for m in paired:
            del body.row_memo[("T", m)]
    nw = body.shape.threads // 32
    for i in wave:
        if i in partners:
            continue
        if i in paired:
            s, sm, ss = paired[i], slots[i], slots[paired[i]]
            body.line(
                f"const KpPair red{i} = kp_cluster_pair<{body.shape.cluster}>("
                f"kp_block_pair<{nw}>(KpPair{{a{i}, a{s}}}, kp_part[{sm}], kp_part[{ss}]), "
                f"&kp_slot[{sm}], &kp_slot[{ss}]);"
            )
            body.row_memo[("T", i)], body.row_memo[("T", s)] = f"red{i}.m", f"red{i}.s"
            continue
        f, s = FUNCTOR[body.spec.ops[i][0]], slots[i]
        body.line(
            f"const float red{i} = kp_cluster<{body.shape.cluster}>("
            f"kp_block<{nw}>(a{i}, kp_part[{s}], {f}()), &kp_slot[{s}], {f}());"
        )
        body.row_memo[("T", i)] = f"red{i}"


def pair_wave(body: Any, wave: list[int], pending: list[int]) -> dict[int, int]:
    """The max reductions of `wave` whose sum of exp(y - max) (still pending) can fold
    in the same wave: with ONLINE=pair, every pair whose other per-row operands are known."""
    if body.spec.knob("ONLINE") != "pair":
        return {}
    out = {}
    for m, s in online_pairs(body.spec, [*wave, *pending]).items():
        known = {*body.row_memo, ("T", m)}
        if (
            m in wave
            and s in pending
            and reduction_ready(body.spec, body.spec.ops[s][1], known, body.level)
        ):
            out[m] = s
    return out
