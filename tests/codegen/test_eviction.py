"""L2 eviction hints in the row template's column loops: a row read again by a later loop is
kept (evict_last) until its last read (evict_first), a weight every row reads is kept, a
program without loops carries none; the hinted kernels compute what PyTorch does. Long rows
read again start at 32 warps (defaults.REREAD_WARPS)."""

from __future__ import annotations

import torch
from harness import check, decomposed_subgraph

from kernelpro_backend.codegen import render
from kernelpro_backend.codegen.eviction import eviction_plan
from kernelpro_backend.lowering import lower


def _rms(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,)


def _loads(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if "tl.load(" in line]


def test_a_row_read_twice_is_kept_until_its_last_read() -> None:
    x, w = torch.randn(6, 300), torch.randn(300)
    sg = decomposed_subgraph(_rms, x, w)
    spec = lower(sg).with_knobs(BLOCK_C=64)
    loads = _loads(render(spec).source)
    row = [s for s in loads if "d0" in s]  # the row's elements, once per loop
    weight = [s for s in loads if "d0" not in s]
    assert len(row) == 2 and "evict_last" in row[0] and "evict_first" in row[1]
    assert weight and all("evict_last" in s for s in weight)
    check(sg, spec, inputs=[x, w])


def test_no_hints_without_a_column_loop() -> None:
    x, w = torch.randn(6, 300), torch.randn(300)
    spec = lower(decomposed_subgraph(_rms, x, w)).with_knobs(BLOCK_C=512)
    assert "eviction_policy" not in render(spec).source


def test_softmax_loops_hint_only_the_reread_row() -> None:
    x = torch.randn(5, 1000)
    sg = decomposed_subgraph(lambda x: (torch.softmax(x, -1),), x)
    spec = lower(sg).with_knobs(BLOCK_C=128)
    loads = _loads(render(spec).source)
    assert [("evict_last" in s, "evict_first" in s) for s in loads] == [
        (True, False),
        (False, True),
    ]
    check(sg, spec, inputs=[x])


def test_plan_of_one_pass_hints_only_row_independent_loads() -> None:
    x, w = torch.randn(6, 300), torch.randn(300)
    spec = lower(decomposed_subgraph(_rms, x, w))
    every = set(range(len(spec.loads)))
    plan = eviction_plan(spec, [len(spec.domain) - 1], [every])
    assert plan and set(plan.values()) == {"evict_last"}
    assert all(not any(d == 0 for d in _dims(spec, i)) for _, i in plan)


def _dims(spec, i):  # type: ignore[no-untyped-def]
    from kernelpro_backend.codegen import index as ix

    return ix.dims_of(spec.loads[i][2])


def test_long_rows_read_again_start_at_32_warps_with_16_byte_steps() -> None:
    """defaults.REREAD_WARPS: a looped RMSNorm (read for its statistics, then again for its
    outputs) starts at 32 warps, 8192 bf16 / 4096 float32 columns a step; cross-entropy's
    per-row loss, one loop over the row, keeps 8 warps x 4096."""
    import torch.nn.functional as F

    for dtype, block in ((torch.bfloat16, 8192), (torch.float32, 4096)):
        x, w = torch.randn(4, 65536).to(dtype), torch.randn(65536).to(dtype)
        seed = lower(decomposed_subgraph(_rms, x, w))
        assert (seed.knob("num_warps"), seed.knob("BLOCK_C")) == (32, block)
    x, t = torch.randn(4, 65536), torch.randint(0, 65536, (4,))
    ce = lower(decomposed_subgraph(lambda x, t: (F.cross_entropy(x, t, reduction="none"),), x, t))
    assert (ce.knob("num_warps"), ce.knob("BLOCK_C")) == (8, 4096)
