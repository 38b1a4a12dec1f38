"""The verdicts on whole graphs a compile reads from the cache behind its provider: the
torch-level rewrites a warm-up measured slower on a graph (by backend.graph_fingerprint), and
where the in-context verdicts of compiles are kept (rewrite/judged.py).

Owns: `verdict_store(provider)`, `graph_options_off(options, provider, fingerprint)`,
`verdict_tolerance(options)` (the in-context verdict's rule under objective "energy").
Must not: time anything or decide a verdict.
"""

from __future__ import annotations

import logging
from typing import Any

from ..options import Options
from ..search.winner import ENERGY_TIME_TOLERANCE

log = logging.getLogger("kernelpro")


def verdict_store(provider: Any) -> Any:
    """The cache's in-context verdicts (cache/context.py) behind `provider`, or None."""
    cache = getattr(provider, "cache", None) or getattr(
        getattr(provider, "inner", None), "cache", None
    )
    return getattr(cache, "context", None)


def verdict_tolerance(opts: Options) -> float | None:
    """Under objective "energy", the time tolerance its rule chose kernels within (a graph's
    in-context verdict keeps them unless the graph is slower beyond it, rewrite/verdict_plan.py);
    None under "time" (kept only where the graph is faster)."""
    return ENERGY_TIME_TOLERANCE if opts.objective == "energy" else None


def graph_options_off(opts: Options, provider: Any, fingerprint: str) -> dict[str, Any]:
    """The torch-level rewrites a warm-up measured slower on this very graph, as the options
    that turn them off (cache/context.py); {} when none, or no cache to ask."""
    store = verdict_store(provider)
    if store is None or opts.search == "off":
        return {}
    try:
        off = store.graph_options(fingerprint)
    except OSError as e:
        log.warning("the warm-up's verdicts could not be read (%s); none applied", e)
        return {}
    if off:
        log.info("this graph's warm-up measured it faster with %s", off)
    return dict(off)
