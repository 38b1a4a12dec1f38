"""The package version, at the bottom so that any layer can report it (pyproject.toml holds the
same number; tests/test_layers.py checks they agree), and the generator's version: the package
version plus a digest of the code that turns a cache entry into a running kernel."""

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"

# The code that turns a cache entry into a running kernel: the spec's builder and templates, and
# the loaders of stored sources and cubins. An entry stored by another version of it is proved
# again before it runs (cache.store.KernelCache.unproved).
_GENERATOR = ("codegen", "runtime/cuda/driver.py", "tuner/artifacts.py")


@functools.lru_cache(maxsize=1)
def generator_version() -> str:
    """`__version__` plus a short digest of the generator's source files ("0.1.0+3f2a9c1b0d4e")."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in _GENERATOR:
        path = root / name
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
            digest.update(file.read_bytes() + b"\0")
    return f"{__version__}+{digest.hexdigest()[:12]}"
