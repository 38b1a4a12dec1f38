"""The kernel cache: keys, the diskcache store, bundles for export/import, integrity checks.

Must not: compile, load or search kernels (loaders and the searcher are injected).
Note: the repository-root `cache/` folder holds shipped bundles; this package reads them.
"""

from .artifact import CorruptEntry, Entry, KernelArtifact, Provenance, decode_entry, encode_entry
from .bundle import Bundle, BundleError, ImportReport, export_bundle, import_bundle, read_bundle
from .maintenance import (
    Checked,
    MaintenanceReport,
    Validator,
    ValidatorUnavailable,
    Verdict,
    prune,
    verify,
)
from .misses import MissManifest
from .provider import CacheProvider, Loader, Searcher, describe, pending, store_winner
from .store import CacheUnavailable, KernelCache, resolve_cache_dir
from .toolchain import (
    CACHE_SCHEMA_VERSION,
    CacheKey,
    Toolchain,
    cache_key,
    current_arch,
    current_toolchain,
)

__all__ = [
    "CACHE_SCHEMA_VERSION",
    "Bundle",
    "BundleError",
    "CacheKey",
    "CacheProvider",
    "CacheUnavailable",
    "Checked",
    "CorruptEntry",
    "Entry",
    "ImportReport",
    "KernelArtifact",
    "KernelCache",
    "Loader",
    "MaintenanceReport",
    "MissManifest",
    "Provenance",
    "Searcher",
    "Toolchain",
    "Validator",
    "ValidatorUnavailable",
    "Verdict",
    "cache_key",
    "current_arch",
    "current_toolchain",
    "decode_entry",
    "describe",
    "encode_entry",
    "export_bundle",
    "import_bundle",
    "pending",
    "prune",
    "read_bundle",
    "resolve_cache_dir",
    "store_winner",
    "verify",
]
