"""Toolchain versions, the GPU model, and the cache key.

Owns: `Toolchain` (torch, triton, CUDA runtime versions; "none" when absent), the current
toolchain and GPU model, `CacheKey` (SubgraphKey + cache schema version) and its digest, which
is the store's key.
Must not: inspect graphs (fx_passes builds the SubgraphKey) or read or write the store.

What goes in the key is what decides which kernel computes the subgraph: its structure,
shapes, dtypes, strides, precision and GPU architecture (all in the SubgraphKey), and the
entry format. The toolchain and the GPU model only change how fast (or whether) a kernel
runs, so they live in the entry's provenance: an entry made under another toolchain or on
another GPU model of the same architecture is found, and re-proved and re-timed here before
it is first used (tuner.finder), instead of being refused. Whether the kernel still compiles
and computes the same function under this toolchain is exactly what the re-proof checks.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any

from ..fx_passes.keys import SubgraphKey
from ..version import generator_version

# Bump when the entry format or the key's fields change meaning: old entries then miss, and
# stored ones are skipped as "wrong schema" (and dropped by `prune`). 2: the toolchain left
# the key for the provenance, which also names the GPU model and where the entry came from.
CACHE_SCHEMA_VERSION = 2


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Versions of everything that compiles, builds or runs a cached kernel."""

    torch: str
    triton: str
    cuda: str  # CUDA runtime torch was built against, "none" on CPU-only builds
    # kernelpro's generator (version.generator_version): what builds and loads a stored kernel.
    generator: str = dataclasses.field(default_factory=generator_version)

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Toolchain:
        fields = {"torch", "triton", "cuda", "generator"}
        if not isinstance(raw, dict) or set(raw) != fields:
            raise ValueError(f"toolchain must be an object with {sorted(fields)}, got {raw!r}")
        if not all(isinstance(v, str) for v in raw.values()):
            raise ValueError(f"toolchain versions must be strings, got {raw!r}")
        return cls(**raw)

    def __str__(self) -> str:
        return (
            f"torch {self.torch}, triton {self.triton}, cuda {self.cuda}, "
            f"kernelpro {self.generator}"
        )


@functools.lru_cache(maxsize=1)
def current_toolchain() -> Toolchain:
    """The toolchain of this process (computed once; versions do not change while it runs)."""
    import torch

    try:
        import triton

        triton_version = str(triton.__version__)
    except ImportError:
        triton_version = "none"
    return Toolchain(
        torch=str(torch.__version__),
        triton=triton_version,
        cuda=str(torch.version.cuda) if torch.version.cuda else "none",
    )


@functools.lru_cache(maxsize=1)
def current_gpu() -> str:
    """The model of this machine's first CUDA device ("NVIDIA H100 80GB HBM3"), "none" without
    one, "unknown" when the driver cannot say (entries then count as made elsewhere)."""
    import torch

    if not torch.cuda.is_available():
        return "none"
    try:
        return str(torch.cuda.get_device_name(0))
    except Exception:  # a broken driver must not fail the compile; re-proofs then stay on
        return "unknown"


def current_arch() -> str:
    """'sm_90' on a machine whose first CUDA device has capability 9.0, else 'cpu'."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return f"sm_{major}{minor}"
    return "cpu"


@dataclasses.dataclass(frozen=True)
class CacheKey:
    """What a cache entry is stored under: everything that decides which kernel computes the
    subgraph (the toolchain and GPU model that made it are in its provenance)."""

    subgraph: SubgraphKey
    schema: int = CACHE_SCHEMA_VERSION

    @property
    def arch(self) -> str:
        return self.subgraph.device

    def to_dict(self) -> dict[str, Any]:
        return {
            "subgraph": json.loads(self.subgraph.to_json()),
            "schema": self.schema,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, raw: Any) -> CacheKey:
        if not isinstance(raw, dict):
            raise ValueError(f"a cache key must be a JSON object, got {type(raw).__name__}")
        return cls(
            subgraph=SubgraphKey.from_json(json.dumps(raw["subgraph"])),
            schema=int(raw["schema"]),
        )

    @classmethod
    def from_json(cls, text: str) -> CacheKey:
        return cls.from_dict(json.loads(text))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def short(self) -> str:
        return self.digest[:12]


def cache_key(subgraph_key: SubgraphKey) -> CacheKey:
    """The key of a subgraph's entry."""
    return CacheKey(subgraph=subgraph_key)
