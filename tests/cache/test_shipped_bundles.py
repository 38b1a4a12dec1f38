"""The bundles shipped in the repository's `cache/` folder: they read (sha256 per entry, nothing
unpickled), are for sm_90, and every kernel in them computes its subgraph's function - the
reference rebuilt from the entry's own canonical text, on fresh inputs, compared at the
evaluator's tolerance (on the CPU through Triton's interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelpro_backend.autotune import load_artifact
from kernelpro_backend.cache.bundle import read_bundle
from kernelpro_backend.cache.store import BUNDLE_SUFFIXES
from kernelpro_backend.fx_passes.rebuild import rebuild_subgraph
from kernelpro_backend.runtime.compare import compare
from kernelpro_backend.runtime.validate import compute_reference, precision_mode

SHIPPED = Path(__file__).resolve().parents[2] / "cache"
BUNDLES = sorted(p for p in SHIPPED.iterdir() if p.name.endswith(BUNDLE_SUFFIXES))
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_the_repository_ships_a_bundle_and_says_what_it_covers() -> None:
    assert BUNDLES, "cache/ holds no bundle"
    readme = (SHIPPED / "README.md").read_text()
    for path in BUNDLES:
        assert path.name in readme, f"cache/README.md does not describe {path.name}"


@pytest.mark.parametrize("path", BUNDLES, ids=[p.name for p in BUNDLES])
def test_every_shipped_kernel_computes_its_subgraph(path: Path) -> None:
    bundle = read_bundle(path)
    assert bundle.entries
    for entry in bundle.entries:
        artifact = entry.artifact
        assert entry.key.arch == "sm_90"
        subgraph = rebuild_subgraph(
            artifact.subgraph_text, entry.key.subgraph, artifact.kind, artifact.pattern,
            device=DEVICE,
        )  # fmt: skip
        kernel = load_artifact(artifact)
        for seed in (11, 12):
            inputs = subgraph.make_inputs(seed, DEVICE)
            with precision_mode(subgraph.precision):
                ref = compute_reference(subgraph.module(), inputs)
                outs = kernel(*inputs)
            assert len(outs) == len(ref.exact)
            for i, got in enumerate(outs):
                eager = ref.eager[i] if ref.eager is not None else None
                rejection, _ = compare(i, got, ref.exact[i], eager)
                assert rejection is None, f"{artifact.pattern} {entry.key.short()}: {rejection}"
