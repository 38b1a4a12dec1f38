"""The tuner: the per-subgraph policy and what it composes (cache, search, evaluator).

Owns: `KernelFinder` (finder.py, the one policy), `default_provider` (provider.py; shared
across ranks by distributed.py), `SubgraphSearcher`
(searcher.py), `PoolMeasurer` (measurer.py), the artifact conversions (artifacts.py) and
re-proving cached entries (verify.py).
Must not: store bytes, render kernels or evaluate candidates itself.
"""

from .artifacts import Loader, artifact_candidate, load_artifact, winner_fields
from .finder import KernelFinder, Searcher
from .provider import default_provider

__all__ = [
    "KernelFinder",
    "Loader",
    "Searcher",
    "artifact_candidate",
    "default_provider",
    "load_artifact",
    "winner_fields",
]
