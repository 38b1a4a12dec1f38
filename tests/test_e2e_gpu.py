"""GPU end to end: warm the cache for the demo's transformer block (search on miss, forward and
backward), export it as a bundle and import that into an empty cache; then training from the
cache alone ("cache-only") matches eager and runs no search, and training from the imported
bundle re-proves and re-times every entry here first, then matches eager too (it runs the
entries that still pay on this fresh timing: a subset of the warmed cache's)."""

from __future__ import annotations

import pytest
import torch
from helpers import train

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.cache import KernelCache, export_bundle, import_bundle
from kernelpro_backend.options import Options
from kernelpro_backend.warmup.offline import warmup

pytestmark = pytest.mark.gpu

BATCH, SEQ = 8, 512  # the demo's size on a GPU


def _cache_only_training(cache_dir) -> tuple[list[float], list[torch.Tensor], int]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, (x,) = examples.transformer_block("cuda", batch=BATCH, seq=SEQ)
    sessions: list[CompileSession] = []
    backend = make_backend(sessions=sessions)
    options = {"search": "cache-only", "cache_dir": str(cache_dir)}
    losses, grads = train(model, x, lambda m: torch.compile(m, backend=backend, options=options))
    return losses, grads, sum(len(r.replaced) for s in sessions for r in s.reports)


def test_warmed_cache_and_its_bundle_train_like_eager(tmp_path):
    torch.set_float32_matmul_precision("highest")
    warm, imported = tmp_path / "warm", tmp_path / "imported"
    torch.manual_seed(0)
    model, (x,) = examples.transformer_block("cuda", batch=BATCH, seq=SEQ)
    report = warmup(
        model,
        (x,),
        train=True,
        budget_s=8,
        options={"cache_dir": str(warm), "max_trials": 4, "workers": 2, "progress": False},
    )
    assert {r.graph for r in report.rows} == {"forward", "backward"}
    bundle = tmp_path / "bundle.tar.gz"
    with KernelCache(warm) as cache:
        exported = export_bundle(cache, bundle)
    with KernelCache(imported) as cache:
        result = import_bundle(cache, bundle)
    assert not result.refused and len(result.imported) == len(exported)

    torch.manual_seed(0)
    model_ref, (x_ref,) = examples.transformer_block("cuda", batch=BATCH, seq=SEQ)
    ref_losses, ref_grads = train(model_ref, x_ref)
    logs = warm / "logs"
    logs_before = len(list(logs.iterdir())) if logs.exists() else 0
    losses, grads, _ = _cache_only_training(warm)
    assert (len(list(logs.iterdir())) if logs.exists() else 0) == logs_before  # no search ran
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-5)
    bundle_losses, bundle_grads, bundle_replaced = _cache_only_training(imported)
    torch.testing.assert_close(bundle_losses, ref_losses, rtol=1e-4, atol=1e-5)
    for g, r in zip(bundle_grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-5)
    with KernelCache(imported) as cache:
        entries = list(cache.entries())
        assert all(cache.unproved(e) is None for e in entries)  # each re-proved before use
    assert {e.artifact.provenance.origin for e in entries} <= {"reproved"}
    need = Options.resolve(options={"search": "cache-only"}).min_gain_ms()
    paying = [
        e for e in entries if e.artifact.baselines_ms["inductor"] - e.artifact.kernel_ms >= need
    ]
    assert (bundle_replaced > 0) == bool(paying)
