"""`kernelpro`: the package `kernelpro_backend` under the name its logger tree and its
torch.compile backend have.

It makes "kernelpro" a module name torch's logging accepts: `TORCH_LOGS=kernelpro` (INFO) or
`TORCH_LOGS=+kernelpro` (DEBUG) turns on the "kernelpro" logger at `import torch`, which finds
this module without importing it (kernelpro_backend/logs/ says why no registration is needed).
`import kernelpro` gives kernelpro_backend's public names.
"""

from kernelpro_backend import (
    Options,
    OptionsError,
    SubgraphInfo,
    __version__,
    dispatch_stats,
    explain,
    make_backend,
)

__all__ = [
    "Options",
    "OptionsError",
    "SubgraphInfo",
    "__version__",
    "dispatch_stats",
    "explain",
    "make_backend",
]
