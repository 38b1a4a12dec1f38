"""`kernelpro`: the package `kernelpro_backend` under the name its logger tree and its
torch.compile backend have.

It makes "kernelpro" a module name torch's logging accepts: `TORCH_LOGS=kernelpro` (INFO) or
`TORCH_LOGS=+kernelpro` (DEBUG) turns on the "kernelpro" logger at `import torch`, which finds
this module without importing it (kernelpro_backend/logs/ says why no registration is needed).
`import kernelpro` gives kernelpro_backend's public names.
"""

import kernelpro_backend
from kernelpro_backend import *  # noqa: F403  (the public names, listed once: kernelpro_backend.__all__)

__all__ = kernelpro_backend.__all__
