"""A column loop's variance in one pass (knob VARIANCE=welford of the row template): a sum `a`
of y and the sum `b` of (y - a / n)**2 over the same row (program_walk.variance_pairs), which
the row template otherwise walks the row twice for (the mean's pass, then the deviations').

Each lane keeps Welford's running count, mean and sum of squared deviations from its mean
(M2) of its values less its first one (the shift: a mean far from zero, as a batch norm's
input may have, then costs no precision in the running updates); after the loop the lanes
combine as Chan's parallel formula does: the row's sum is the lanes' counts times their means,
its M2 the lanes' M2 plus each count times its mean's squared distance from the row's mean. A batch norm in training (its statistics over N, H, W: rows of
hundreds of thousands of columns) then reads its input twice, not three times.

Owns: `welford_start`, `welford_step`, `welford_finish` (the lines of one pair, for
rowwise._column_pass) and `welford_combine` (a split row's chunks, for rowsplit.py).
Must not: decide which reductions pair (program_walk.py) or whether the knob is legal (knobs.py).
"""

from __future__ import annotations

from typing import Any

from ..emitter import Emitter


def welford_start(em: Emitter, a: int) -> None:
    """The pair's per-lane state: its first value (the shift), count, mean and M2 of the values
    less the shift (named wf_...: no clash with the emitter's names)."""
    for name in (f"wf_k{a}", f"wf_cnt{a}", f"wf_mean{a}", f"wf_m2_{a}"):
        em.line(f"{name} = tl.zeros([ROWS, BLOCK_C], tl.float32)")


def welford_step(em: Emitter, a: int, y: Any) -> None:
    """One column block folded into each valid lane's state (`y`: the summed value's ref)."""
    em.line(f"wf_y{a} = {em.value(y)}")
    em.line(f"wf_k{a} = tl.where((wf_cnt{a} == 0) & mask, wf_y{a}, wf_k{a})")
    em.line(f"wf_s{a} = wf_y{a} - wf_k{a}")
    em.line(f"wf_n{a} = wf_cnt{a} + tl.where(mask, 1.0, 0.0)")
    em.line(f"wf_d{a} = tl.where(mask, wf_s{a} - wf_mean{a}, 0.0)")
    em.line(f"wf_mean{a} = wf_mean{a} + wf_d{a} / tl.maximum(wf_n{a}, 1.0)")
    em.line(f"wf_m2_{a} = wf_m2_{a} + wf_d{a} * tl.where(mask, wf_s{a} - wf_mean{a}, 0.0)")
    em.line(f"wf_cnt{a} = wf_n{a}")


def welford_finish(em: Emitter, a: int, b: int) -> None:
    """The lanes combined around the row's first lane's shift `wf_r` (small terms, so the row's
    sum is rounded once, where it is formed): the row's sum as `t_red{a}`, its M2 as
    `t_red{b}`."""
    em.line(
        f"wf_r{a} = tl.sum(tl.where(tl.arange(0, BLOCK_C)[None, :] == 0, wf_k{a}, 0.0), axis=1)[:, None]"
    )
    em.line(f"wf_c{a} = tl.where(wf_cnt{a} > 0, wf_k{a} - wf_r{a} + wf_mean{a}, 0.0)")
    em.line(f"wf_total{a} = tl.sum(wf_cnt{a}, axis=1)[:, None]")
    em.line(f"wf_off{a} = tl.sum(wf_cnt{a} * wf_c{a}, axis=1)[:, None]")
    em.line(f"t_red{a} = wf_total{a} * wf_r{a} + wf_off{a}")
    em.line(f"wf_dev{a} = wf_c{a} - wf_off{a} / tl.maximum(wf_total{a}, 1.0)")
    em.line(f"t_red{b} = tl.sum(wf_m2_{a} + wf_cnt{a} * wf_dev{a} * wf_dev{a}, axis=1)[:, None]")
    em.global_memo[("T", a)] = f"t_red{a}"
    em.global_memo[("T", b)] = f"t_red{b}"


def welford_combine(em: Emitter, a: int, b: int, sums: str, m2s: str, counts: str) -> None:
    """A split row's chunks combined (templates/rowsplit.py): `sums` and `m2s` the chunks' sums
    and M2 ([ROWS, parts] tiles), `counts` their columns; the row's sum as `t_red{a}`, its M2
    as `t_red{b}` (Chan's formula over the chunks)."""
    em.line(f"t_red{a} = tl.sum({sums}, axis=1)[:, None]")
    em.line(f"wf_rmean{a} = t_red{a} / tl.maximum(tl.sum({counts}, axis=1)[:, None], 1.0)")
    em.line(
        f"wf_dev{a} = tl.where({counts} > 0, {sums} / tl.maximum({counts}, 1.0) - wf_rmean{a}, 0.0)"
    )
    em.line(f"t_red{b} = tl.sum({m2s} + {counts} * wf_dev{a} * wf_dev{a}, axis=1)[:, None]")
    em.global_memo[("T", a)] = f"t_red{a}"
    em.global_memo[("T", b)] = f"t_red{b}"
