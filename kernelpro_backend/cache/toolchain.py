"""Toolchain versions and the cache key built from them.

Owns: `Toolchain` (torch, triton, CUDA runtime versions; "none" when absent), the current
toolchain, `CacheKey` (SubgraphKey + toolchain + cache schema version) and its digest, which is
the store's key.
Must not: inspect graphs (fx_passes builds the SubgraphKey) or read or write the store.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from typing import Any

from ..fx_passes.keys import SubgraphKey

# Bump when the entry format or the key's fields change meaning: old entries then miss, and
# stored ones are skipped as "wrong schema" (and dropped by `prune`).
CACHE_SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """Versions of everything that compiles or runs a cached kernel."""

    torch: str
    triton: str
    cuda: str  # CUDA runtime torch was built against, "none" on CPU-only builds

    def to_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Toolchain:
        if not isinstance(raw, dict) or set(raw) != {"torch", "triton", "cuda"}:
            raise ValueError(f"toolchain must be an object with torch/triton/cuda, got {raw!r}")
        if not all(isinstance(v, str) for v in raw.values()):
            raise ValueError(f"toolchain versions must be strings, got {raw!r}")
        return cls(torch=raw["torch"], triton=raw["triton"], cuda=raw["cuda"])

    def __str__(self) -> str:
        return f"torch {self.torch}, triton {self.triton}, cuda {self.cuda}"


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


def current_arch() -> str:
    """'sm_90' on a machine whose first CUDA device has capability 9.0, else 'cpu'."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return f"sm_{major}{minor}"
    return "cpu"


@dataclasses.dataclass(frozen=True)
class CacheKey:
    """What a cache entry is stored under: everything that changes the kernel or its result."""

    subgraph: SubgraphKey
    toolchain: Toolchain
    schema: int = CACHE_SCHEMA_VERSION

    @property
    def arch(self) -> str:
        return self.subgraph.device

    def to_dict(self) -> dict[str, Any]:
        return {
            "subgraph": json.loads(self.subgraph.to_json()),
            "toolchain": self.toolchain.to_dict(),
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
            toolchain=Toolchain.from_dict(raw["toolchain"]),
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


def cache_key(subgraph_key: SubgraphKey, toolchain: Toolchain | None = None) -> CacheKey:
    """The key of a subgraph under a toolchain (default: this process's)."""
    return CacheKey(subgraph=subgraph_key, toolchain=toolchain or current_toolchain())
