"""On a GPU: `verify` re-proves real Triton (codegen) entries keyed for this arch; subgraphs
traced on CUDA rebuild from their text."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernelpro_backend.cache import KernelArtifact, cache_key, describe, verify
from kernelpro_backend.tuner.verify import CacheEntryValidator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _spec_artifact(sg):
    from kernelpro_backend.codegen import lower, render

    spec = lower(sg)
    r = render(spec)
    return KernelArtifact(r.language, r.source, r.entry, spec_json=spec.to_json())


def test_verify_keeps_a_correct_triton_entry_and_drops_a_wrong_one(cache):
    from graphs import scaled_tanh, trace

    x = torch.randn(64, 96, device="cuda")
    (sg,) = trace(scaled_tanh, x)
    (shifted,) = trace(lambda t: torch.tanh(t) * 3.0 + 2.0, x)
    good = cache.key_for(sg.key)
    assert good.arch.startswith("sm_")
    cache.put(good, describe(_spec_artifact(sg), sg))
    bad = cache.key_for(dataclasses.replace(sg.key, precision="tf32"))
    cache.put(bad, describe(_spec_artifact(shifted), sg))
    with CacheEntryValidator(seed=5) as validator:
        report = verify(cache, validator)
    assert report.kept == 1 and [d.digest for d in report.dropped] == [bad.digest]
    assert report.dropped[0].reason.startswith("wrong")
    assert cache.get(good) is not None and cache.get(bad) is None


def test_cuda_subgraphs_rebuild_and_rekey(cache):
    from graphs import linear_softmax_subgraph

    from kernelpro_backend.fx_passes import rebuild_subgraph

    sg = linear_softmax_subgraph()
    key = cache_key(sg.key)
    assert key.arch == "cpu"  # traced on CPU: rebuild it on the GPU under a GPU key
    gpu_key = dataclasses.replace(
        sg.key, device=f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
    )
    rebuilt = rebuild_subgraph(sg.text, gpu_key, sg.kind, sg.pattern)
    assert rebuilt.device.type == "cuda" and rebuilt.key == gpu_key
    inputs = sg.make_inputs(2)
    expected = sg.module()(*inputs)
    got = rebuilt.module()(*[t.cuda() for t in inputs])
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-4)
