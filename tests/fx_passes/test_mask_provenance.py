"""Which outputs of a graph are masks proved constant (sdpa_mask.constant_outputs), and the
registry that says, at run time, that a tensor is one of them and unwritten since
(mask_provenance): only the registered object itself, never a view, a copy, a tensor written
in place or an inference tensor; held weakly."""

from __future__ import annotations

import gc

import pytest
import torch

from kernelpro_backend.fx_passes import mask_provenance
from kernelpro_backend.fx_passes.mask_provenance import ALL, CAUSAL, ProvenMask, proven, register
from kernelpro_backend.fx_passes.sdpa_mask import constant_outputs

T = 6


def _bool_causal(x):
    return torch.ones(T, T, dtype=torch.bool).tril()[None, None].expand(2, 1, T, T)


def _additive_causal(x):
    keep = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    return torch.zeros(T, T).masked_fill(~keep, float("-inf"))


def _all(x):
    return (torch.arange(T) >= 0)[None, None, None, :].expand(2, 1, T, T)


def _drawn(x):  # all True on every draw, but drawn: never a constant
    return torch.rand(2, 1, T, T) < 2.0


def _from_input(x):
    return x > -1e9


def _neither(x):
    return torch.ones(T, T, dtype=torch.bool).triu()


def _several(x):  # an activation, a proved mask, and a constant that is no mask
    return x * 2, torch.ones(T, T, dtype=torch.bool), torch.full((T, T), 3.0)


def _outputs(fn) -> dict[int, ProvenMask]:
    found = []

    def backend(gm, example_inputs):
        found.append(constant_outputs(gm))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(torch.randn(2, 1, T, T))
    (outputs,) = found
    return outputs


@pytest.mark.parametrize(
    ("fn", "kind", "dtype"),
    [(_bool_causal, CAUSAL, torch.bool), (_additive_causal, CAUSAL, torch.float32),
     (_all, ALL, torch.bool)],
)  # fmt: skip
def test_an_output_built_from_positions_is_proved_with_its_kind(fn, kind, dtype):
    (fact,) = _outputs(fn).values()
    assert fact.kind == kind and fact.dtype == dtype
    assert fact.shape == tuple(fn(None).shape)


@pytest.mark.parametrize("fn", [_drawn, _from_input, _neither])
def test_a_drawn_input_dependent_or_other_output_is_not(fn):
    assert _outputs(fn) == {}


def test_only_the_mask_among_several_outputs():
    assert _outputs(_several) == {1: ProvenMask(ALL, (T, T), torch.bool)}


FACT = ProvenMask(ALL, (T, T), torch.bool)


def _registered() -> torch.Tensor:
    t = torch.ones(T, T, dtype=torch.bool)
    register(t, FACT)
    return t


def test_the_registered_tensor_is_proven_until_written_in_place():
    t = _registered()
    assert proven(t) == FACT
    t[0, 1] = False
    assert proven(t) is None


def test_a_view_a_copy_or_a_swapped_storage_is_not_proven():
    t = _registered()
    assert proven(t[:]) is None and proven(t.view(T, T)) is None and proven(t.clone()) is None
    u = _registered()
    u.data = torch.ones(T, T, dtype=torch.bool)  # new storage, no in-place op on u
    assert proven(u) is None


def test_an_inference_tensor_is_never_registered():
    with torch.inference_mode():
        t = torch.ones(T, T, dtype=torch.bool)
    register(t, FACT)
    assert proven(t) is None


def test_the_registry_holds_its_tensors_weakly():
    before = len(mask_provenance._PROVEN)
    t = _registered()
    assert len(mask_provenance._PROVEN) == before + 1
    del t
    gc.collect()
    assert len(mask_provenance._PROVEN) == before
