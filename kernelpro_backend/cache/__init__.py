"""The kernel cache: keys, the diskcache store, bundles for export/import, integrity checks,
the miss manifest.

Must not: decide policy (tuner/ does), or compile, load or search kernels; maintenance's
`verify` is handed the validator that re-proves entries (tuner/verify.py).
Note: the repository-root `cache/` folder holds shipped bundles; this package reads them.
"""

from ..paths import resolve_cache_dir
from .artifact import CorruptEntry, Entry, KernelArtifact, Provenance, decode_entry, encode_entry
from .bundle import Bundle, BundleError, read_bundle
from .entries import describe, pending, store_winner
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
from .store import CacheUnavailable, KernelCache
from .toolchain import (
    CACHE_SCHEMA_VERSION,
    CacheKey,
    Toolchain,
    cache_key,
    current_arch,
    current_toolchain,
)
from .transfer import ImportReport, export_bundle, import_bundle

__all__ = [
    "CACHE_SCHEMA_VERSION",
    "Bundle",
    "BundleError",
    "CacheKey",
    "CacheUnavailable",
    "Checked",
    "CorruptEntry",
    "Entry",
    "ImportReport",
    "KernelArtifact",
    "KernelCache",
    "MaintenanceReport",
    "MissManifest",
    "Provenance",
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
