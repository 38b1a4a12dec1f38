"""The cache as a kernel provider, and the hooks through which search fills it.

Owns: `CacheProvider` (the KernelProvider protocol over a KernelCache): the search policy
("cache-only" | "on-miss" | "off"), turning hits into Kernels through an injected loader,
calling an injected searcher on misses when the policy allows and storing its winner, and
recording misses in the manifest. Also `store_winner` and `pending` for `kernelpro warmup`.
Must not: compile, load or search by itself: loaders (codegen/runtime) and the searcher
(search/) are passed in.

    provider = CacheProvider.from_options(options, loader=runtime_loader, searcher=search_fn)
    make_backend(provider=provider)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping

from ..fx_passes import Subgraph
from ..options import Options
from ..providers import Kernel
from .artifact import KernelArtifact
from .store import KernelCache
from .toolchain import CacheKey

log = logging.getLogger("kernelpro.cache")

# Turns a cached artifact into a callable kernel (inputs/outputs in canonical order). May raise
# if the artifact cannot be loaded here; the subgraph then runs on the fallback.
Loader = Callable[[KernelArtifact], Kernel]
# Searches one subgraph; returns the proved winner, or None when nothing beats the fallback.
Searcher = Callable[[Subgraph], "KernelArtifact | None"]


def describe(artifact: KernelArtifact, subgraph: Subgraph) -> KernelArtifact:
    """The artifact with the subgraph's pattern, kind, ops and canonical text filled in."""
    return dataclasses.replace(
        artifact,
        pattern=artifact.pattern or subgraph.pattern,
        kind=artifact.kind or subgraph.kind,
        ops=artifact.ops or tuple(subgraph.ops),
        subgraph_text=artifact.subgraph_text or subgraph.text,
    )


def store_winner(cache: KernelCache, subgraph: Subgraph, artifact: KernelArtifact) -> CacheKey:
    """Store a search winner for `subgraph` as soon as it is found (so an interrupted warm-up
    keeps every subgraph already done) and return its key."""
    key = cache.key_for(subgraph.key)
    cache.put(key, describe(artifact, subgraph))
    return key


def pending(cache: KernelCache, subgraphs: Iterable[Subgraph]) -> list[Subgraph]:
    """The subgraphs (with fixed shapes) that have no usable entry yet: what a resumed warm-up
    still has to search, in the given order, each key once."""
    todo: dict[str, Subgraph] = {}
    for sg in subgraphs:
        if not sg.symbolic:
            todo.setdefault(cache.key_for(sg.key).digest, sg)
    keys = {cache.key_for(sg.key): sg for sg in todo.values()}
    return [keys[k] for k in cache.missing(keys)]


class CacheProvider:
    """Finds kernels in the cache; on a miss searches (policy "on-miss") or records the miss."""

    def __init__(
        self,
        cache: KernelCache,
        options: Options,
        loader: Loader,
        searcher: Searcher | None = None,
    ) -> None:
        self.cache = cache
        self.options = options
        self.loader = loader
        self.searcher = searcher
        self._loaded: dict[str, Kernel] = {}
        self._warned_no_searcher = False

    @classmethod
    def from_options(
        cls,
        options: Options,
        loader: Loader,
        searcher: Searcher | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> CacheProvider:
        cache = KernelCache(options.cache_dir, options.extra_cache_dirs, environ=environ)
        return cls(cache, options, loader, searcher)

    def find(self, subgraph: Subgraph) -> Kernel | None:
        policy = self.options.search
        if policy == "off" or subgraph.symbolic:
            return None
        key = self.cache.key_for(subgraph.key)
        if key.digest in self._loaded:
            return self._loaded[key.digest]
        artifact = self.cache.get(key)
        if artifact is not None:
            if not self._pays_off(artifact):
                return None
            return self._load(key, artifact, subgraph)
        if policy == "on-miss":
            found = self._search(subgraph)
            if found is not None:
                found = describe(found, subgraph)
                self.cache.put(key, found)
                return self._load(key, found, subgraph)
        try:
            recorded = self.cache.misses.record(key, subgraph)
        except OSError as e:  # a read-only cache must not break the user's compile
            log.warning("kernelpro cache: cannot record miss in %s: %s", self.cache.misses.path, e)
            recorded = False
        if recorded:
            log.info(
                "kernelpro cache: miss for %s %s (%s); running the fallback",
                subgraph.pattern,
                key.short(),
                subgraph.graph,
            )
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

    def _search(self, subgraph: Subgraph) -> KernelArtifact | None:
        if self.searcher is None:
            if not self._warned_no_searcher:
                log.warning(
                    "kernelpro cache: search='on-miss' but no searcher is installed; misses run "
                    "the fallback and are recorded in %s",
                    self.cache.misses.path,
                )
                self._warned_no_searcher = True
            return None
        try:
            return self.searcher(subgraph)
        except Exception:
            # A search that crashes must not take the user's compile down; the fallback runs.
            log.exception("kernelpro cache: search for %s failed", subgraph.pattern)
            return None

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
