"""The bundles shipped in the repository's `cache/` folder: they read (sha256 per entry, nothing
unpickled), are for sm_90, and every kernel in them computes its subgraph's function - the
reference rebuilt from the entry's own canonical text, on fresh inputs, compared at the
evaluator's tolerance (on the CPU through Triton's interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelpro_backend.cache.bundle import read_bundle
from kernelpro_backend.cache.store import BUNDLE_SUFFIXES
from kernelpro_backend.fx_passes.rebuild import rebuild_subgraph
from kernelpro_backend.runtime.compare import compare
from kernelpro_backend.runtime.precision import precision_mode
from kernelpro_backend.runtime.validate import compute_reference
from kernelpro_backend.tuner import load_artifact

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


# The example and its size each bundle was warmed up at (cache/README.md).
WARMED_UP = {
    "sm90-mlp.tar.gz": ("mlp", {}),
    "sm90-convnet.tar.gz": ("convnet", {}),
    "sm90-transformer-block.tar.gz": ("transformer_block", {"batch": 8, "seq": 512}),
}


@pytest.mark.parametrize("path", BUNDLES, ids=[p.name for p in BUNDLES])
def test_shipped_kernels_still_match_a_subgraph_of_their_example(path: Path) -> None:
    """A partition change that cut the examples differently would leave shipped kernels that
    no compile can hit any more: every entry's structure must still be one the backend cuts."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers import subgraphs_of

    from kernelpro_backend import examples

    name, kwargs = WARMED_UP[path.name]
    model, inputs = examples.EXAMPLES[name]("cpu", **kwargs)
    cut = {sg.key.structure for sg in subgraphs_of(model, *inputs) if not sg.symbolic}
    for entry in read_bundle(path).entries:
        assert entry.key.subgraph.structure in cut, (
            f"{path.name}: {entry.artifact.pattern} {entry.key.subgraph.short()} is no longer "
            "a subgraph of its example: re-run its warm-up (cache/README.md)"
        )


def test_every_shipped_kernel_is_admitted() -> None:
    """Another machine admits every bundled kernel (tuner/admit.py): as stored, or, where
    this kernelpro's generator renders its spec differently, with the source rendered here
    (scripts/rerender_shipped.py brings the stored sources up to date)."""
    from kernelpro_backend.tuner.admit import admit

    for path in BUNDLES:
        for entry in read_bundle(path).entries:
            verdict = admit(entry.artifact)
            assert not isinstance(verdict, str), f"{path.name} {entry.key.short()}: {verdict}"
