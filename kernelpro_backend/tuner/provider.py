"""Which provider the backend uses for a set of options.

Owns: `default_provider(options, custom)`: nothing, the user's provider, the KernelFinder
(cache lookups, re-proofs, search on a miss), or that finder shared across the ranks of a
torch.distributed job (distributed.py).
Must not: hold the per-subgraph policy (finder.py does).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from ..cache.store import CacheUnavailable
from ..options import Options
from ..rewrite.providers import KernelProvider, NullProvider
from .finder import KernelFinder

log = logging.getLogger("kernelpro.cache")


def default_provider(options: Options, custom: Any = None) -> KernelProvider:
    """The provider for `options`: nothing under search="off" or without a CUDA GPU (every
    subgraph runs on the fallback); else `custom` (a provider, or a factory of options) when
    given, else cache lookups plus search on misses under "on-miss" — shared across the ranks
    when torch.distributed runs several (distributed.py, option `distributed`)."""
    if options.search == "off":
        return NullProvider()
    if custom is not None:
        return custom if isinstance(custom, KernelProvider) else custom(options)
    if not torch.cuda.is_available():
        return NullProvider()
    from .reprove import Reprover
    from .searcher import SubgraphSearcher

    # "transfer" proves a neighbouring size's winner at a new size under cache-only: it needs
    # the searcher's workers, not its search.
    proves = options.search == "on-miss" or options.dynamic_shapes == "transfer"
    searcher = SubgraphSearcher(options) if proves else None
    try:
        finder = KernelFinder.from_options(options, searcher=searcher, prover=Reprover(options))
    except CacheUnavailable as e:
        log.warning("%s; every subgraph runs on the fallback", e)
        return NullProvider()
    if options.search == "on-miss" and options.distributed == "auto":
        from .exchange import Exchange, distributed_world

        if distributed_world() is not None:
            from .distributed import DistributedFinder

            return DistributedFinder(finder, Exchange(options.distributed_timeout_s))
    return finder
