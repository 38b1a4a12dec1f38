"""kernelpro: a torch.compile backend that finds, proves and caches faster GPU kernels.

model = torch.compile(model, backend="kernelpro")

Owns: the public names, and putting the "kernelpro" logger's last-resort handler in place
(logs/: the messages carry no prefix; the handler adds the logger's name when the program
configured no logging).
"""

from __future__ import annotations

from .backend import make_backend
from .explain import SubgraphInfo, explain
from .logs import install as _install_logging
from .options import Options, OptionsError
from .rewrite.dispatch import dispatch_stats
from .version import __version__

_install_logging()

__all__ = [
    "Options",
    "OptionsError",
    "SubgraphInfo",
    "__version__",
    "dispatch_stats",
    "explain",
    "make_backend",
]
