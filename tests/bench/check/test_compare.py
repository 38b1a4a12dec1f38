import math

import pytest
import torch

from kernelpro_backend.bench.check.compare import compare, named_tensors, tolerance


def test_float32_within_tolerance_matches_and_beyond_does_not():
    torch.manual_seed(0)
    ref = torch.randn(64, 32)
    rtol, atol = tolerance(torch.float32)
    close = ref + atol / 2
    far = ref.clone()
    far[3, 4] += 10 * (atol + rtol * abs(float(ref[3, 4])))
    assert compare({"out": close}, {"out": ref}).ok
    bad = compare({"out": far}, {"out": ref})
    assert not bad.ok
    assert bad.mismatches[0].tensor == "out"
    assert "1 of 2048 elements" in bad.describe()


def test_shape_dtype_and_missing_tensors_are_mismatches():
    ref = {"out": torch.ones(4), "grad.w": torch.ones(2)}
    result = compare({"out": torch.ones(5)}, ref)
    reasons = {m.tensor: m.reason for m in result.mismatches}
    assert "got (5,)" in reasons["out"]
    assert reasons["grad.w"] == "missing"
    assert not compare({"out": torch.ones(4, dtype=torch.float64)}, {"out": torch.ones(4)}).ok


def test_nan_where_eager_is_finite_is_wrong():
    result = compare({"out": torch.tensor([1.0, float("nan")])}, {"out": torch.ones(2)})
    assert not result.ok
    assert math.isinf(result.max_abs_err)


def test_bf16_fp64_rule_accepts_an_as_accurate_result_and_rejects_a_worse_one():
    gen = torch.Generator().manual_seed(0)
    exact = torch.randn(4096, dtype=torch.float64, generator=gen) * 100

    def noisy(scale: float) -> torch.Tensor:
        r = torch.rand(4096, dtype=torch.float64, generator=gen) * 2 - 1
        return (exact * (1 + scale * r)).to(torch.bfloat16)

    eager, as_accurate, worse = noisy(3e-2), noisy(3e-2), noisy(0.2)
    # Elementwise the two equally accurate results differ by more than bf16's tolerance ...
    assert not compare({"out": as_accurate}, {"out": eager}).ok
    # ... but against float64 neither is worse than the other: accepted.
    assert compare({"out": as_accurate}, {"out": eager}, {"out": exact}).ok
    rejected = compare({"out": worse}, {"out": eager}, {"out": exact})
    assert not rejected.ok
    assert "vs float64: rmse" in rejected.describe()


def test_integer_outputs_must_match_exactly():
    assert compare({"i": torch.tensor([1, 2])}, {"i": torch.tensor([1, 2])}).ok
    assert not compare({"i": torch.tensor([1, 3])}, {"i": torch.tensor([1, 2])}).ok


def test_named_tensors_flattens_nested_outputs():
    a, b = torch.ones(1), torch.zeros(2)
    assert set(named_tensors("out", (a, {"x": b}))) == {"out[0]", "out[1]"}
    assert set(named_tensors("out", a)) == {"out"}


def test_unknown_float_dtype_has_no_tolerance():
    with pytest.raises(ValueError, match="runtime.compare.TOLERANCE"):
        tolerance(torch.float8_e4m3fn)


def test_fp64_rule_still_fails_one_bad_element_that_the_mean_hides():
    gen = torch.Generator().manual_seed(1)
    exact = torch.randn(1 << 16, dtype=torch.float64, generator=gen)
    eager = exact.to(torch.bfloat16)
    one_bad = eager.clone()
    one_bad[123] += 1.0  # rmse grows by only 1/256, the largest error by ~100x
    rejected = compare({"out": one_bad}, {"out": eager}, {"out": exact})
    assert not rejected.ok
    assert "max err" in rejected.describe()


def test_fp64_rule_applies_to_float32_tf32_like_noise():
    gen = torch.Generator().manual_seed(2)
    exact = torch.randn(4096, dtype=torch.float64, generator=gen)

    def tf32_like() -> torch.Tensor:  # ~1e-3 relative noise, as TF32 convs give
        return (exact * (1 + 1e-3 * torch.randn(4096, dtype=torch.float64, generator=gen))).float()

    eager, other = tf32_like(), tf32_like()
    assert not compare({"out": other}, {"out": eager}).ok
    assert compare({"out": other}, {"out": eager}, {"out": exact}).ok


def test_large_outputs_are_compared_slice_by_slice(monkeypatch):
    """The error and the count of elements out of tolerance come out the same when the
    comparison walks slices (it does for outputs of gigabytes)."""
    from kernelpro_backend.bench.check import compare as module

    expected = torch.randn(37, 41)
    actual = expected.clone()
    actual[5, 7] += 1.0
    actual[30, 2] = -actual[30, 2] * 3
    whole = module.compare_one("y", actual, expected)
    monkeypatch.setattr(module, "ERROR_CHUNK", 64)
    sliced = module.compare_one("y", actual, expected)
    assert whole is not None and sliced is not None
    assert sliced == whole
    assert "2 of 1517 elements" in sliced.reason
