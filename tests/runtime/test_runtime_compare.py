"""The tensor-level checks and the timing helpers, on hand-made tensors."""

import torch

from kernelpro_backend.runtime import EvalResult, EvalStatus, faster
from kernelpro_backend.runtime.compare import (
    aliased_pairs,
    bitwise_equal,
    check_aliasing,
    check_deterministic,
    check_inputs_unmodified,
    compare,
    poison_allocator,
)
from kernelpro_backend.runtime.timing import SPREAD_FLOOR, Timing, summarize


def test_float32_tolerance_accepts_rounding_and_rejects_bf16_level_error():
    ref = torch.randn(1000, dtype=torch.float64)
    ok, ratio = compare(0, ref.float(), ref, ref.float())
    assert ok is None and ratio <= 1.0
    bad, ratio = compare(0, ref.bfloat16().float(), ref, ref.float())
    assert bad is not None and bad.status is EvalStatus.WRONG and ratio > 1
    assert bad.details["lower_precision_suspected"]


def test_bf16_output_is_judged_at_bf16_tolerance():
    ref = torch.randn(1000, dtype=torch.float64)
    assert compare(0, ref.bfloat16(), ref, ref.bfloat16())[0] is None


def test_eager_error_widens_the_bound_by_a_fixed_factor():
    ref = torch.randn(100, dtype=torch.float64)
    eager = (ref + 1e-3).float()  # e.g. a TF32 matmul under the tf32 policy
    assert compare(0, (ref + 1.9e-3).float(), ref, eager)[0] is None
    assert compare(0, (ref + 3e-3).float(), ref, eager)[0] is not None


def test_nan_where_reference_is_finite_is_named():
    ref = torch.ones(4, 4, dtype=torch.float64)
    got = ref.float().clone()
    got[2, 3] = float("nan")
    rejection, _ = compare(1, got, ref, None)
    assert rejection.details["index"] == (2, 3) and rejection.details["output"] == 1
    assert "never wrote" in rejection.message


def test_nonfinite_reference_must_be_matched():
    ref = torch.tensor([float("inf"), float("nan"), 1.0], dtype=torch.float64)
    assert compare(0, ref.float(), ref, None)[0] is None
    assert compare(0, torch.tensor([1.0, float("nan"), 1.0]), ref, None)[0] is not None


def test_integer_outputs_are_exact():
    ref = torch.tensor([1, 2, 3])
    assert compare(0, ref.clone(), ref, ref)[0] is None
    rejection, _ = compare(0, torch.tensor([1, 2, 4]), ref, ref)
    assert rejection.details["index"] == (2,)


def test_aliasing_allows_only_what_the_reference_does():
    x = torch.randn(4, 4)
    view = x[1:]
    assert aliased_pairs([view], [x]) == {"out0~in0"}
    assert check_aliasing([view], [x], allowed={"out0~in0"}) is None
    assert check_aliasing([view], [x], allowed=set()).status is EvalStatus.SUSPICIOUS
    assert aliased_pairs([x[:2], x[2:]], []) == set()  # disjoint halves do not overlap
    assert aliased_pairs([x[:3], x[2:]], []) == {"out0~out1"}


def test_modified_input_is_suspicious():
    x = torch.randn(8)
    saved = x.clone()
    assert check_inputs_unmodified([x], [saved]) is None
    x[3] += 1
    assert check_inputs_unmodified([x], [saved]).details == {"input": 0}


def test_determinism_is_bitwise():
    a = torch.randn(16)
    assert check_deterministic([a], [a.clone()]) is None
    assert check_deterministic([a], [torch.nextafter(a, a + 1)]) is not None  # one ulp
    assert bitwise_equal(torch.tensor([float("nan")]), torch.tensor([float("nan")]))


def test_poisoned_block_is_reused_by_the_next_empty():
    poison_allocator([((64, 64), (64, 1), "float32")], torch.device("cpu"))
    # glibc hands the freed block back for the same size: not guaranteed, but the check
    # relies on it on CUDA's caching allocator; on CPU any non-NaN reuse still fails compare.
    out = torch.empty(64, 64)
    assert out.shape == (64, 64)


def test_spread_has_a_floor_and_ties_inside_it():
    t = summarize([1.0] * 20, "events")
    assert t.median_ms == 1.0 and t.spread_ms == SPREAD_FLOOR
    spread = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "events")
    assert spread.median_ms == 3.5 and spread.spread_ms == (5.0 - 2.0) / 2
    a, b = Timing(1.0, 0.02, (), "events"), Timing(1.03, 0.02, (), "events")
    assert faster(a, b) is None
    c = Timing(1.2, 0.02, (), "events")
    assert faster(a, c) is True and faster(c, a) is False
    assert faster(EvalResult(EvalStatus.WRONG), a) is None


def test_large_outputs_are_compared_in_slices_with_the_same_verdict(monkeypatch):
    """Slices bound the float64 temporaries; the verdict, worst ratio and index are those of
    the whole-tensor comparison."""
    import kernelpro_backend.runtime.compare as cmp

    ref = torch.randn(50, 77, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got, eager = ref.float().clone(), ref.float()
    got[33, 5] += 1.0
    whole, whole_ratio = cmp.compare(0, got, ref, eager)
    monkeypatch.setattr(cmp, "COMPARE_CHUNK", 1000)
    sliced, sliced_ratio = cmp.compare(0, got, ref, eager)
    assert whole is not None and sliced is not None
    assert sliced.details["index"] == whole.details["index"] == (33, 5)
    assert sliced_ratio == whole_ratio
    got[33, 5] -= 1.0
    assert cmp.compare(0, got, ref, eager)[0] is None
