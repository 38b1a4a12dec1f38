"""Small aten graphs traced with fake tensors, and a Python-source artifact with its loader.

Shared by the cache tests and by the subprocesses they start (imported by path)."""

from __future__ import annotations

import dataclasses

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.cache import KernelArtifact, Provenance, Toolchain, current_toolchain
from kernelpro_backend.fx_passes import Subgraph, find_subgraphs
from kernelpro_backend.rewrite.providers import CallableKernel, Kernel


def linear_softmax(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.softmax(torch.addmm(b, x, w).relu(), -1)


def scaled_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 3.0 + 1.0


def trace(fn, *example: torch.Tensor, graph: str = "inference") -> list[Subgraph]:
    return find_subgraphs(make_fx(fn, tracing_mode="fake")(*example), graph)


def linear_softmax_subgraph(m: int = 4, k: int = 8, n: int = 16, dtype=torch.float32):
    (sg,) = trace(
        linear_softmax,
        torch.randn(m, k, dtype=dtype),
        torch.randn(k, n, dtype=dtype),
        torch.randn(n, dtype=dtype),
    )
    return sg


def tanh_subgraph(shape=(8, 32), dtype=torch.float32) -> Subgraph:
    (sg,) = trace(scaled_tanh, torch.randn(*shape, dtype=dtype))
    return sg


TANH_SOURCE = """
import torch

def scaled_tanh(x):
    return [torch.tanh(x) * 3.0 + 1.0]
"""


def python_artifact(
    tag: int = 0, toolchain: Toolchain | None = None, binary: bytes | None = None
) -> KernelArtifact:
    """A kernel written in Python (the test loader execs it): the tanh subgraph's computation.
    `tag` varies the launch metadata so entries differ."""
    return KernelArtifact(
        language="python",
        source=TANH_SOURCE,
        entry="scaled_tanh",
        launch={"tag": tag, "grid": [tag + 1, 1, 1]},
        binary=binary,
        kernel_ms=0.01 + tag * 1e-4,
        baselines_ms={"eager": 0.03, "inductor": 0.02},
        sol_fraction=0.5,
        provenance=Provenance(toolchain=toolchain or current_toolchain(), search_log=f"log-{tag}"),
    )


def python_loader(artifact: KernelArtifact) -> Kernel:
    """Test loader: exec the Python source of an artifact and call its entry function."""
    if artifact.language != "python":
        raise ValueError(f"test loader only loads python artifacts, got {artifact.language}")
    namespace: dict = {}
    exec(compile(artifact.source, f"<artifact {artifact.entry}>", "exec"), namespace)
    return CallableKernel(f"cached-{artifact.entry}", namespace[artifact.entry])


def with_arch(key, arch: str):
    """The same cache key for another GPU arch."""
    return dataclasses.replace(key, subgraph=dataclasses.replace(key.subgraph, device=arch))
