"""The one per-subgraph policy: which kernel, if any, replaces a subgraph.

Owns: `KernelFinder.find` — already loaded? → cache hit that pays off on this launch path →
search on a miss when the policy allows ("on-miss") → store the winner → load it; everything
else runs the fallback and a miss is recorded in the manifest (with why a search was skipped)
— and `default_provider(options)`, the provider the backend uses.
Must not: store bytes (cache/ does), search (searcher.py) or convert artifacts
(artifacts.py); it only decides.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..cache.artifact import KernelArtifact
from ..cache.entries import describe
from ..cache.store import CacheUnavailable, KernelCache
from ..cache.toolchain import CacheKey
from ..fx_passes import Subgraph
from ..options import Options
from ..providers import Kernel, KernelProvider, NullProvider
from .admit import admit
from .artifacts import Loader, load_artifact

log = logging.getLogger("kernelpro.cache")

# Searches one subgraph; returns the proved winner, or None when nothing beats the fallback.
Searcher = Callable[[Subgraph], "KernelArtifact | None"]


class KernelFinder:
    """Finds kernels in the cache; on a miss searches (policy "on-miss") or records the miss."""

    def __init__(
        self,
        cache: KernelCache,
        options: Options,
        loader: Loader = load_artifact,
        searcher: Searcher | None = None,
    ) -> None:
        self.cache = cache
        self.options = options
        self.loader = loader
        self.searcher = searcher
        self._loaded: dict[str, Kernel] = {}
        self._warned_no_searcher = False
        self._warned_cache_fault = False
        self._searched: set[str] = set()  # keys searched here that kept the fallback

    @classmethod
    def from_options(
        cls,
        options: Options,
        loader: Loader = load_artifact,
        searcher: Searcher | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> KernelFinder:
        cache = KernelCache(
            options.cache_dir, options.extra_cache_dirs, environ=environ, admit=admit
        )
        return cls(cache, options, loader, searcher)

    def find(self, subgraph: Subgraph) -> Kernel | None:
        """The policy, in order; None runs the fallback."""
        if self.options.search == "off" or subgraph.symbolic:
            return None
        key = self.cache.key_for(subgraph.key)
        if key.digest in self._loaded:
            return self._loaded[key.digest]
        artifact = self._cache_op("read", lambda: self.cache.get(key))
        skipped = None
        if key.digest in self._searched:
            return None  # searched in this process, nothing beat the fallback: not again
        if artifact is None and self.options.search == "on-miss":
            artifact, skipped = self._search(subgraph)
            if artifact is None and skipped is None:
                # The same subgraph comes back in a recompile, or forward and backward share
                # it (measured on H100: half the searches of a KernelBench warm-up repeated one).
                self._searched.add(key.digest)
            if artifact is not None:
                artifact = describe(artifact, subgraph)
                self._cache_op("store a kernel in", lambda: self.cache.put(key, artifact))
        if artifact is None:
            self._record_miss(key, subgraph, skipped)
            return None
        if not self._pays_off(artifact):
            return None
        return self._load(key, artifact, subgraph)

    def _cache_op(self, what: str, op: Callable[[], Any]) -> Any:
        """`op()`, or None when the cache fails (locked, full disk, read-only, corrupt): a
        cache fault warns once and the compile goes on."""
        try:
            return op()
        except (OSError, sqlite3.Error) as e:
            if not self._warned_cache_fault:
                log.warning(
                    "kernelpro cache: cannot %s %s (%s: %s); going on without it",
                    what,
                    self.cache.directory,
                    type(e).__name__,
                    e,
                )
                self._warned_cache_fault = True
            return None

    def _pays_off(self, artifact: KernelArtifact) -> bool:
        """A hit is used only if it saved the launch path's minimum gain over this fallback when
        it was measured (an entry found with inlined launches may not pay through the op)."""
        base = artifact.baselines_ms.get(self.options.fallback)
        if base is None or artifact.kernel_ms is None:
            return True
        need = self.options.min_gain_ms()
        if base - artifact.kernel_ms >= need:
            return True
        log.info(
            "kernelpro cache: cached %s kernel saves %.1f us over %s, under the %.1f us this "
            "launch path needs; running the fallback",
            artifact.pattern,
            (base - artifact.kernel_ms) * 1e3,
            self.options.fallback,
            need * 1e3,
        )
        return False

    def _search(self, subgraph: Subgraph) -> tuple[KernelArtifact | None, str | None]:
        """(winner or None, why the search was skipped or None)."""
        if self.searcher is None:
            if not self._warned_no_searcher:
                log.warning(
                    "kernelpro cache: search='on-miss' but no searcher is installed; misses run "
                    "the fallback and are recorded in %s",
                    self.cache.misses.path,
                )
                self._warned_no_searcher = True
            return None, None
        try:
            found = self.searcher(subgraph)
        except Exception:
            # A search that crashes must not take the user's compile down; the fallback runs.
            log.exception("kernelpro cache: search for %s failed", subgraph.pattern)
            return None, None
        return found, getattr(self.searcher, "skipped", None)

    def _record_miss(self, key: CacheKey, subgraph: Subgraph, reason: str | None) -> None:
        # A read-only or full cache must not break the user's compile (one warning).
        recorded = self._cache_op(
            "record a miss in", lambda: self.cache.misses.record(key, subgraph, reason)
        )
        if recorded:
            log.info(
                "kernelpro cache: miss for %s %s (%s); running the fallback",
                subgraph.pattern,
                key.short(),
                subgraph.graph,
            )

    def _load(self, key: CacheKey, artifact: KernelArtifact, subgraph: Subgraph) -> Kernel | None:
        try:
            kernel = self.loader(artifact)
        except Exception as e:
            log.warning(
                "kernelpro cache: cannot load cached %s kernel for %s %s (%s: %s); running the "
                "fallback. `kernelpro cache verify` drops entries that no longer load.",
                artifact.language,
                subgraph.pattern,
                key.short(),
                type(e).__name__,
                e,
            )
            return None
        self._loaded[key.digest] = kernel
        return kernel


def default_provider(options: Options, custom: Any = None) -> KernelProvider:
    """The provider for `options`: nothing under search="off" or without a CUDA GPU (every
    subgraph runs on the fallback); else `custom` (a provider, or a factory of options) when
    given, else cache lookups plus search on misses under "on-miss"."""
    if options.search == "off":
        return NullProvider()
    if custom is not None:
        return custom if isinstance(custom, KernelProvider) else custom(options)
    if not torch.cuda.is_available():
        return NullProvider()
    from .searcher import SubgraphSearcher

    searcher = SubgraphSearcher(options) if options.search == "on-miss" else None
    try:
        return KernelFinder.from_options(options, searcher=searcher)
    except CacheUnavailable as e:
        log.warning("kernelpro: %s; every subgraph runs on the fallback", e)
        return NullProvider()
