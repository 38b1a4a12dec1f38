"""On a GPU: `verify` (and `kernelpro cache verify`) re-proves real Triton (codegen) entries
keyed for this arch; subgraphs traced on CUDA rebuild from their text."""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch

from kernelpro_backend.cache import KernelArtifact, KernelCache, cache_key, describe, verify
from kernelpro_backend.cli.cache import run_cli
from kernelpro_backend.cli.main import build_parser
from kernelpro_backend.tuner.verify import CacheEntryValidator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _spec_artifact(sg):
    from kernelpro_backend.codegen import render
    from kernelpro_backend.lowering import lower

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


def _cache_verify(cache_dir, *flags: str) -> tuple[int, str]:
    parser = build_parser()
    args = parser.parse_args(["cache", "--cache-dir", str(cache_dir), "verify", *flags])
    out = io.StringIO()
    return run_cli(args, out=out), out.getvalue()


def test_cache_verify_cli_on_codegen_entries_of_an_example_model(tmp_path):
    """`kernelpro cache verify` on codegen entries of the MLP's CUDA subgraphs: --dry-run
    deletes nothing; then the correct entries are kept and re-timed (--retime), the wrong one
    (tanh*3+2 stored under tanh*3+1) is dropped and the entry for another arch is left alone."""
    from graphs import scaled_tanh, trace

    from kernelpro_backend import examples
    from kernelpro_backend.codegen import Unsupported
    from kernelpro_backend.explain import find_subgraphs

    torch.set_float32_matmul_precision("highest")
    model, inputs = examples.EXAMPLES["mlp"]("cuda")
    good = []
    with KernelCache(tmp_path) as cache:
        for sg in find_subgraphs(model, *inputs, train=True):
            if len(good) >= 6:  # each is compiled, validated and re-timed
                break
            try:
                artifact = _spec_artifact(sg)
            except Unsupported:
                continue
            key = cache.key_for(sg.key)
            if key not in good:
                cache.put(key, describe(artifact, sg))
                good.append(key)
        x = torch.randn(64, 96, device="cuda")
        (tanh,) = trace(scaled_tanh, x)
        (shifted,) = trace(lambda t: torch.tanh(t) * 3.0 + 2.0, x)
        wrong = cache.key_for(tanh.key)
        cache.put(wrong, describe(_spec_artifact(shifted), tanh))
        other = "sm_80" if wrong.arch != "sm_80" else "sm_90"
        foreign = dataclasses.replace(wrong, subgraph=dataclasses.replace(tanh.key, device=other))
        cache.put(foreign, describe(_spec_artifact(tanh), tanh))
    assert good

    code, text = _cache_verify(tmp_path, "--dry-run")
    with KernelCache(tmp_path) as cache:
        assert len(list(cache.entries())) == len(good) + 2, text
    code, text = _cache_verify(tmp_path, "--retime", "--seed", "7")
    with KernelCache(tmp_path) as cache:
        left = {e.key.digest: e.artifact for e in cache.entries()}
    assert all(k.digest in left for k in good), text
    assert wrong.digest not in left, text
    assert foreign.digest in left, text
    assert all(left[k.digest].kernel_ms is not None for k in good), text
