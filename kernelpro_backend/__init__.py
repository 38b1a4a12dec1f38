"""kernelpro: a torch.compile backend that finds, proves and caches faster GPU kernels.

model = torch.compile(model, backend="kernelpro")
"""

from __future__ import annotations

from .backend import make_backend
from .explain import SubgraphInfo, explain
from .options import Options, OptionsError
from .rewrite.dispatch import dispatch_stats
from .version import __version__

__all__ = [
    "Options",
    "OptionsError",
    "SubgraphInfo",
    "__version__",
    "dispatch_stats",
    "explain",
    "make_backend",
]
