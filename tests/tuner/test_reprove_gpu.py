"""On the GPU: kernels made elsewhere are re-proved in the worker pool before they first run,
then used. A bundle exported under another toolchain and GPU model (imported, or read from an
extra cache directory), and the repository's shipped `cache/` as the README's install meets it
(a fresh cache directory): training matches eager and the entries run."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import torch
from helpers import train

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.cache import (
    KernelCache,
    Toolchain,
    current_toolchain,
    export_bundle,
    import_bundle,
)
from kernelpro_backend.cache.bundle import read_bundle
from kernelpro_backend.cache.toolchain import current_gpu
from kernelpro_backend.options import Options
from kernelpro_backend.paths import shipped_cache_dir
from kernelpro_backend.tuner.admit import admit

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHIPPED = shipped_cache_dir() or Path("cache")
ELSEWHERE = Toolchain("2.10.0+cu128", "3.5.1", "12.8")
# The example and size each shipped bundle was warmed up at (cache/README.md).
EXAMPLE = {
    "sm90-mlp.tar.gz": ("mlp", {}),
    "sm90-convnet.tar.gz": ("convnet", {}),
    "sm90-transformer-block.tar.gz": ("transformer_block", {"batch": 8, "seq": 512}),
}


def _exported_elsewhere(tmp_path: Path, bundle: str) -> Path:
    """The shipped bundle's kernels, as another machine (another toolchain, an H200) would have
    stored and exported them."""
    with KernelCache(tmp_path / "elsewhere", toolchain=ELSEWHERE, gpu="NVIDIA H200") as made:
        for entry in read_bundle(SHIPPED / bundle).entries:
            prov = dataclasses.replace(
                entry.artifact.provenance, toolchain=ELSEWHERE, gpu="NVIDIA H200", origin="search"
            )
            made.put(entry.key, dataclasses.replace(entry.artifact, provenance=prov))
        out = tmp_path / "ship" / bundle
        assert len(export_bundle(made, out)) == len(read_bundle(SHIPPED / bundle).entries)
    return out


def _train_with(name: str, kwargs: dict, options: dict) -> tuple[int, int]:
    """Train the example under eager and under kernelpro; (subgraphs replaced, found)."""
    model_ref, (x,) = examples.EXAMPLES[name]("cuda", **kwargs)
    model, _ = examples.EXAMPLES[name]("cuda", **kwargs)
    model.load_state_dict(model_ref.state_dict())
    torch._dynamo.reset()
    ref_losses, ref_grads = train(model_ref, x)
    sessions: list[CompileSession] = []
    losses, grads = train(
        model,
        x,
        lambda m: torch.compile(m, backend=make_backend(sessions=sessions), options=options),
    )
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-4)
    replaced = sum(len(r.replaced) for s in sessions for r in s.reports)
    found = sum(r.subgraphs for s in sessions for r in s.reports)
    return replaced, found


def _reproved_here(cache_dir: Path) -> list:
    with KernelCache(cache_dir) as cache:
        entries = list(cache.entries())
        assert all(cache.unproved(e) is None for e in entries)
    for e in entries:
        made = e.artifact.provenance
        assert made.origin == "reproved" and made.gpu == current_gpu()
        assert made.toolchain == current_toolchain()
    return entries


@pytest.mark.parametrize("how", ["import", "extra_cache_dirs"])
def test_a_bundle_from_another_toolchain_and_gpu_is_reproved_then_used(tmp_path, how, caplog):
    bundle = _exported_elsewhere(tmp_path, "sm90-mlp.tar.gz")
    here = tmp_path / "here"
    options: dict = {"search": "cache-only", "cache_dir": str(here)}
    if how == "import":
        with KernelCache(here) as cache:
            report = import_bundle(cache, bundle, admit=admit)
        assert report.refused == [] and len(report.imported) == 4
    else:
        options["extra_cache_dirs"] = [str(bundle.parent)]
    with caplog.at_level(logging.INFO, logger="kernelpro.cache"):
        replaced, found = _train_with("mlp", {}, options)
    entries = _reproved_here(here)
    assert len(entries) == 4, caplog.text
    assert all(
        "NVIDIA H200 with torch 2.10.0" in e.artifact.provenance.tools["made_on"] for e in entries
    )
    assert replaced >= 1, caplog.text
    print(f"\n{how}: {len(entries)} re-proved, {replaced} of {found} subgraphs replaced")


@pytest.mark.parametrize("bundle", sorted(EXAMPLE))
def test_the_shipped_cache_serves_its_examples_on_a_fresh_install(tmp_path, bundle, caplog):
    """What the README's user meets: a fresh cache directory, the shipped folder named as an
    extra directory, no search. Each shipped kernel is re-proved and re-timed here; those still
    faster than the fallback on this GPU by the launch path's minimum gain run."""
    name, kwargs = EXAMPLE[bundle]
    ship = tmp_path / "ship"
    ship.mkdir()
    (ship / bundle).write_bytes((SHIPPED / bundle).read_bytes())
    options = {
        "search": "cache-only",
        "cache_dir": str(tmp_path / "c"),
        "extra_cache_dirs": [str(ship)],
    }
    with caplog.at_level(logging.INFO, logger="kernelpro.cache"):
        replaced, found = _train_with(name, kwargs, options)
    entries = _reproved_here(tmp_path / "c")
    shipped = len(read_bundle(SHIPPED / bundle).entries)
    assert len(entries) == shipped, caplog.text
    # Used where its time here still saves what the launch path needs over the fallback.
    need = Options.resolve(options=options).min_gain_ms()
    paying = [
        e for e in entries if e.artifact.baselines_ms["inductor"] - e.artifact.kernel_ms >= need
    ]
    print(f"\n{bundle}: {len(entries)} of {shipped} shipped kernels re-proved here, "
          f"{len(paying)} still pay; {replaced} of {found} subgraphs replaced")  # fmt: skip
    assert replaced >= len(paying), caplog.text
    if not paying:  # the log says why each one kept the fallback, or ran on trial (near tie)
        said = [
            line
            for line in caplog.text.splitlines()
            if "under the" in line or "served tentatively" in line
        ]
        assert len(said) >= len(entries), caplog.text
