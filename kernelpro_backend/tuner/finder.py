"""The one per-subgraph policy: which kernel, if any, replaces a subgraph.

Owns: `KernelFinder.find` — already loaded? → cache hit, re-proved here first when it was made
elsewhere (imported, a bundle directory, another toolchain or GPU model), that pays off on
this launch path → search on a miss when the policy allows ("on-miss") → store the winner →
load it; everything else runs the fallback and a miss is recorded in the manifest (with why a
search was skipped or a cached entry refused). Whether a hit pays off is payoff.py's rule.
Must not: store bytes (cache/), search (searcher.py) or convert artifacts (artifacts.py).
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..cache.artifact import Entry, KernelArtifact
from ..cache.entries import describe
from ..cache.maintenance import Verdict
from ..cache.signing import load_keys
from ..cache.store import Hit, KernelCache
from ..cache.toolchain import CacheKey
from ..fx_passes import Subgraph
from ..options import Options
from ..rewrite.providers import IsolatedMs, Kernel
from ..runtime.cuda.host import use_library_dir
from .admit import admit
from .artifacts import Loader, load_artifact
from .eager import eager_kernel, is_eager
from .family import same_buckets, size_distance, spec_config
from .payoff import firm, pays_off

log = logging.getLogger("kernelpro.cache")

# Searches one subgraph; returns the proved winner, or None when nothing beats the fallback.
Searcher = Callable[[Subgraph], "KernelArtifact | None"]
# Re-proves and re-times an entry made elsewhere on this machine (tuner.reprove.Reprover); an
# "ok" verdict whose `updated` artifact is recorded as proved here lets the entry run.
Prover = Callable[[Entry], Verdict]
# Winners of other sizes a search at a new size of the same symbolic subgraph starts from.
FAMILY_HINTS = 3


class KernelFinder:
    """Finds kernels in the cache; on a miss searches (policy "on-miss") or records the miss."""

    def __init__(
        self,
        cache: KernelCache,
        options: Options,
        loader: Loader = load_artifact,
        searcher: Searcher | None = None,
        prover: Prover | None = None,
    ) -> None:
        self.cache, self.options, self.loader, self.searcher = cache, options, loader, searcher
        self.prover = prover
        self._loaded: dict[str, Kernel] = {}
        self._artifacts: dict[str, KernelArtifact] = {}  # resolved here, by key digest
        # Family (symbolic key digest) -> its instances' entries in the store; read on first use.
        self._families: dict[str, list[tuple[CacheKey, KernelArtifact]]] | None = None
        self._warned_no_searcher = self._warned_no_prover = self._warned_cache_fault = False
        self.searched: set[str] = set()  # keys searched here that kept the fallback
        self._refused: dict[str, str] = {}  # keys whose entry failed its re-proof here: why
        # A warm-up's finders: serve its held kernels; stop searching past its search time
        self.serve_held, self.searching = False, True

    @classmethod
    def from_options(
        cls,
        options: Options,
        loader: Loader = load_artifact,
        searcher: Searcher | None = None,
        environ: Mapping[str, str] | None = None,
        prover: Prover | None = None,
    ) -> KernelFinder:
        cache = KernelCache(
            options.cache_dir,
            options.extra_cache_dirs,
            environ=environ,
            admit=admit,
            # A key file that cannot be read raises SigningKeyError: a setting to fix, like a
            # bad option, not a bundle to skip.
            trusted_keys=load_keys(options.trusted_bundle_keys),
            require_signed=options.require_signed_bundles,
        )
        use_library_dir(cache.layout.cubin_root)  # CUTLASS kernels' libraries: beside cubins
        return cls(cache, options, loader, searcher, prover)

    def prepare(self, subgraphs: Sequence[Subgraph]) -> None:
        """A graph's subgraphs before their finds: the searcher starts what they will need."""
        if self.options.search == "on-miss" and hasattr(self.searcher, "queue_builds"):
            self.searcher.queue_builds(subgraphs)  # type: ignore[union-attr]

    def prestart(self) -> None:
        """Under "on-miss", start the searcher's workers now (a warm-up, before it traces)."""
        if self.options.search == "on-miss" and hasattr(self.searcher, "prestart"):
            self.searcher.prestart()  # type: ignore[union-attr]

    def find(self, subgraph: Subgraph) -> Kernel | None:
        """The policy, in order; None runs the fallback."""
        if self.options.search == "off" or subgraph.symbolic:
            return None
        key = self.cache.key_for(subgraph.key)
        if key.digest in self._loaded:
            return self._loaded[key.digest]
        return self.use(subgraph, self.resolve(subgraph))

    def find_dynamic(self, subgraph: Subgraph) -> Kernel | None:
        """The same policy for the static instance of a symbolic subgraph (rewrite/dispatch.py): its
        kernel always runs behind an opaque op, so it must pay off on that launch path."""
        if self.options.search == "off" or subgraph.symbolic:
            return None
        artifact = self._artifacts.get(self.cache.key_for(subgraph.key).digest)
        listed = self._listed(subgraph)
        if artifact is None:
            artifact = self.resolve(subgraph, search=listed)
        if artifact is None and self._transfers(subgraph, listed):
            artifact = self._transfer(subgraph)
        if artifact is None and not listed:
            sizes = ", ".join(map(str, subgraph.dynamic_sizes))
            why = f"dynamic sizes {sizes} not in compile_sizes: not searched"
            self.record_miss(self.cache.key_for(subgraph.key), subgraph, why)
        return self.use(subgraph, artifact, behind_op=True)

    def _listed(self, subgraph: Subgraph) -> bool:
        """Under "on-miss": `compile_sizes` is empty or lists one of its dynamic sizes."""
        sizes = self.options.compile_sizes
        if self.options.search != "on-miss" or not sizes:
            return True
        return any(s in sizes for s in subgraph.dynamic_sizes)

    def _transfers(self, subgraph: Subgraph, listed: bool = True) -> bool:
        """Whether a size without a cache entry gets its bucket's winner proved at its size:
        under "transfer" with cache-only, and for the sizes `compile_sizes` leaves out."""
        wanted = (
            self.options.search == "cache-only" and self.options.dynamic_shapes == "transfer"
        ) or not listed
        return wanted and bool(subgraph.family) and self.searcher is not None

    def _transfer(self, subgraph: Subgraph) -> KernelArtifact | None:
        """The winner of a size in this size's power-of-two bucket, proved here at this size
        (compiled, validated, timed against the fallback; the search measures it alone), or
        None. Stored like a search winner."""
        hints = self.family_hints(subgraph, same_bucket=True)
        if not hints:
            return None
        key = self.cache.key_for(subgraph.key)
        found, _ = self._search(dataclasses.replace(subgraph, hints=hints, hints_only=True))
        if found is None:
            return None
        artifact = describe(found, subgraph)
        self.cache_op("store a kernel in", lambda: self.cache.put(key, artifact))
        if self._families is not None:
            self._families.setdefault(artifact.family, []).append((key, artifact))
        log.info(
            "%s %s: a winner of its size bucket, proved at these sizes",
            subgraph.pattern,
            key.short(),
        )
        return artifact

    def resolve(self, subgraph: Subgraph, search: bool = True) -> KernelArtifact | None:
        """The subgraph's proved artifact — a cache hit (re-proved here first if it was made
        elsewhere) or, under "on-miss" and `search`, a search winner, stored — or None (miss
        recorded; without `search` the caller records it)."""
        key = self.cache.key_for(subgraph.key)
        if key.digest in self.searched:
            return None  # searched in this process, nothing beat the fallback: not again
        hit = self.cache_op("read", lambda: self.cache.lookup(key))
        artifact = None if hit is None else self._proved(key, hit)
        skipped = self._refused.get(key.digest)
        if artifact is None and self.options.search == "on-miss" and search and self.searching:
            artifact, skipped = self._search(subgraph)
            if artifact is None and skipped is None:
                # The same subgraph comes back in a recompile, or forward and backward share
                # it (measured on H100: half the searches of a KernelBench warm-up repeated one).
                self.searched.add(key.digest)
            if artifact is not None:
                artifact = describe(artifact, subgraph)
                self.cache_op("store a kernel in", lambda: self.cache.put(key, artifact))
                if artifact.family and self._families is not None:
                    self._families.setdefault(artifact.family, []).append((key, artifact))
        if artifact is None and search:
            self.record_miss(key, subgraph, skipped)
        return artifact

    def isolated_ms(self, subgraph: Subgraph) -> IsolatedMs | None:
        """The kernel's ms and the fallback's measured alone, for the artifact this finder serves
        `subgraph` (tentative: a near tie, for the in-context verdict); None without figures."""
        artifact = self._artifacts.get(self.cache.key_for(subgraph.key).digest)
        if artifact is None or artifact.kernel_ms is None:
            return None
        fallback = artifact.baselines_ms.get(self.options.fallback)
        if fallback is None:
            return None
        return IsolatedMs(artifact.kernel_ms, fallback, tentative=not firm(artifact, self.options))

    def use(
        self, subgraph: Subgraph, artifact: KernelArtifact | None, behind_op: bool = False
    ) -> Kernel | None:
        """The kernel of a resolved artifact if it pays off on this launch path (or behind the
        opaque op, `behind_op`), else None."""
        key = self.cache.key_for(subgraph.key)
        if artifact is not None:
            self._artifacts[key.digest] = artifact
        if key.digest in self._loaded and not behind_op:
            return self._loaded[key.digest]
        lost = self.cache_op(
            "read", lambda: self.cache.context.set_aside(key.digest, self.serve_held)
        )
        if artifact is None or lost or not self._pays_off(artifact, behind_op):
            return None  # slower inside its model at warm-up, or held (cache/context.py)
        if key.digest in self._loaded:
            return self._loaded[key.digest]
        return self._load(key, artifact, subgraph)

    def proved(self, key: CacheKey, hit: Hit) -> KernelArtifact | None:
        """The path of every entry made elsewhere (a bundle, an import, another rank): `hit`'s
        artifact if it was proved on this toolchain and GPU model, else once re-proved here."""
        return self._proved(key, hit)

    def _proved(self, key: CacheKey, hit: Hit) -> KernelArtifact | None:
        """The hit's artifact if it was proved on this machine, or once it is re-proved and
        re-timed here (then stored as this machine's); None when it cannot be."""
        if hit.unproved is None:
            return hit.artifact
        if key.digest in self._refused:
            return None
        what = f"{hit.artifact.pattern or 'kernel'} {key.short()} from {hit.source}"
        if self.prover is None:
            if not self._warned_no_prover:
                log.warning(
                    "%s is not proved on this machine (%s) and nothing here "
                    "can re-prove it; running the fallback",
                    what,
                    hit.unproved,
                )
                self._warned_no_prover = True
            return None
        log.info("re-proving %s on this machine (%s)", what, hit.unproved)
        # Whatever its provenance claims, it has not been proved here: the prover records the
        # proof it makes as this machine's.
        claimed = hit.artifact.provenance
        entry = dataclasses.replace(
            hit.entry,
            artifact=dataclasses.replace(
                hit.artifact, provenance=dataclasses.replace(claimed, origin="import")
            ),
        )
        try:
            verdict = self.prover(entry)
        except Exception as e:  # a prover that cannot run must not take the compile down
            verdict = Verdict("failed", f"the re-proof could not run ({type(e).__name__}: {e})")
        updated = verdict.updated
        if verdict.status != "ok" or updated is None or not self._proved_here(updated):
            reason = f"cached entry not re-proved here ({hit.unproved}): {verdict.reason}"
            log.warning("not using %s: %s", what, reason)
            self._refused[key.digest] = reason
            return None
        log.info("%s: %s", what, verdict.reason)
        self.cache_op("store a re-proved kernel in", lambda: self.cache.put(key, updated))
        return updated

    def _proved_here(self, artifact: KernelArtifact) -> bool:
        return artifact.provenance.proved_on(self.cache.toolchain, self.cache.gpu)

    def cache_op(self, what: str, op: Callable[[], Any]) -> Any:
        """`op()`, or None when the cache fails (locked, full disk, read-only, corrupt): a
        cache fault warns once and the compile goes on."""
        try:
            return op()
        except (OSError, sqlite3.Error) as e:
            if not self._warned_cache_fault:
                log.warning(
                    "cannot %s %s (%s: %s); going on without it",
                    what,
                    self.cache.directory,
                    type(e).__name__,
                    e,
                )
                self._warned_cache_fault = True
            return None

    def _pays_off(self, artifact: KernelArtifact, behind_op: bool = False) -> bool:
        """Whether a hit is served on this launch path (tuner/payoff.py: the time rule, a near
        tie for the in-context verdict, or under "energy" an entry chosen for its joules)."""
        return pays_off(artifact, self.options, behind_op)

    def _search(self, subgraph: Subgraph) -> tuple[KernelArtifact | None, str | None]:
        """(winner or None, why the search was skipped or None)."""
        if self.searcher is None:
            if not self._warned_no_searcher:
                log.warning(
                    "search='on-miss' but no searcher is installed; misses run "
                    "the fallback and are recorded in %s",
                    self.cache.misses.path,
                )
                self._warned_no_searcher = True
            return None, None
        if subgraph.family and not subgraph.hints:
            subgraph = dataclasses.replace(subgraph, hints=self.family_hints(subgraph))
        try:
            found = self.searcher(subgraph)
        except Exception:
            # A search that crashes must not take the user's compile down; the fallback runs.
            log.exception("search for %s failed", subgraph.pattern)
            return None, None
        return found, getattr(self.searcher, "skipped", None)

    def _family_index(self) -> dict[str, list[tuple[CacheKey, KernelArtifact]]]:
        """Family -> the store's entries of its instances, read once per finder."""
        if self._families is None:
            found: dict[str, list[tuple[CacheKey, KernelArtifact]]] = {}
            for entry in self.cache_op("read", lambda: list(self.cache.entries())) or []:
                if entry.artifact.family:
                    found.setdefault(entry.artifact.family, []).append((entry.key, entry.artifact))
            self._families = found
        return self._families

    def family_known(self, family: str) -> bool:
        """Whether the cache holds a kernel for some size of this symbolic subgraph (so a
        dispatcher pays even when the sizes it was compiled at have none)."""
        return self.options.search != "off" and bool(self._family_index().get(family))

    def family_hints(
        self, subgraph: Subgraph, same_bucket: bool = False
    ) -> tuple[tuple[str, tuple[Any, ...]], ...]:
        """The (template, knobs) of the winners at other sizes of the subgraph's family, nearest
        sizes first (at most FAMILY_HINTS): a search at a new size measures them beside its
        seed, so it starts where the neighbouring sizes ended."""
        families = self._family_index()
        sizes = [shape for shape, _, _ in subgraph.input_meta]
        ranked = []
        for key, artifact in families.get(subgraph.family, []):
            config = spec_config(artifact.spec_json)
            if same_bucket and not same_buckets(sizes, key.subgraph.inputs):
                continue
            if config is not None:
                ranked.append((size_distance(sizes, key.subgraph.inputs), config))
        ranked.sort(key=lambda dc: dc[0])
        return tuple(dict.fromkeys(config for _, config in ranked))[:FAMILY_HINTS]

    def record_miss(self, key: CacheKey, subgraph: Subgraph, reason: str | None) -> None:
        recorded = self.cache_op(
            "record a miss in", lambda: self.cache.misses.record(key, subgraph, reason)
        )
        if recorded:
            log.info("miss for %s %s (%s); running the fallback",
                     subgraph.pattern, key.short(), subgraph.graph)  # fmt: skip

    def _load(self, key: CacheKey, artifact: KernelArtifact, subgraph: Subgraph) -> Kernel | None:
        try:
            kernel = eager_kernel(subgraph) if is_eager(artifact) else self.loader(artifact)
        except Exception as e:
            log.warning(
                "cannot load cached %s kernel for %s %s (%s: %s); running the "
                "fallback. `kernelpro cache verify` drops entries that no longer load.",
                artifact.language, subgraph.pattern, key.short(), type(e).__name__, e,
            )  # fmt: skip
            return None
        self._loaded[key.digest] = kernel
        return kernel
