"""Every on-disk location of kernelpro, and the one atomic write.

Owns: the cache directory rule (an explicit directory, i.e. `Options.cache_dir` >
$KERNELPRO_CACHE_DIR > ~/.cache/kernelpro), `CacheLayout`, the files beneath it, the private
per-user directory generated modules are imported from, the repository's shipped `cache/`
folder (`shipped_cache_dir`), the check that a directory holding code is private to this user
(`private_dir`, `private_or_fresh`: generated modules, cubins, host libraries), and
`atomic_write` (a temporary file in the same directory, fsync, os.replace: a reader or a crash
sees the old file or the new one, never half of one).
Must not: import anything of the package but version/options, read or parse the files it
names, or change os.environ (workers get the layout as an argument).

Layout of a cache directory:
    kernels/                     the diskcache store of entries (cache/store.py)
    misses.jsonl                 the miss manifest (cache/misses.py)
    context.json                 kernels that lost inside their model (cache/context.py)
    cubin/<2 hex>/<sha>-<16 hex>.cubin  compiled CUDA sources (and host libraries, .so), named
                                 by their content's sha256 beside the record <sha>.cubin.sha256
                                 (runtime/cuda/built.py); directories 0700; $KERNELPRO_CUBIN_DIR
                                 puts them elsewhere
    search_memory.jsonl          moves and their gains (search/memory.py)
    ceilings-<device>.json       the device's measured ceilings (profilers/ceilings.py)
    logs/<key>.jsonl             one search log per subgraph (tuner/searcher.py)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("kernelpro")

CACHE_DIR_ENV = "KERNELPRO_CACHE_DIR"
CUBIN_DIR_ENV = "KERNELPRO_CUBIN_DIR"
PathLike = str | os.PathLike[str]


def resolve_cache_dir(
    directory: PathLike | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """The writable cache directory: the argument, else $KERNELPRO_CACHE_DIR, else
    ~/.cache/kernelpro."""
    environ = os.environ if environ is None else environ
    chosen = directory or environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "kernelpro"
    return Path(chosen).expanduser()


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """The files of one cache directory. Plain paths: picklable, so a worker process gets the
    parent's layout in its start arguments rather than re-reading the environment."""

    root: Path
    cubin_root: Path

    @classmethod
    def of(
        cls, directory: PathLike | None = None, environ: Mapping[str, str] | None = None
    ) -> CacheLayout:
        """The layout of `directory` (Options.cache_dir) under the cache directory rule."""
        environ = os.environ if environ is None else environ
        root = resolve_cache_dir(directory, environ)
        cubins = environ.get(CUBIN_DIR_ENV)
        return cls(root, Path(cubins).expanduser() if cubins else root / "cubin")

    @property
    def kernels(self) -> Path:
        return self.root / "kernels"

    @property
    def misses(self) -> Path:
        return self.root / "misses.jsonl"

    @property
    def context(self) -> Path:
        return self.root / "context.json"

    @property
    def searched(self) -> Path:
        return self.root / "searched.jsonl"

    @property
    def search_memory(self) -> Path:
        return self.root / "search_memory.jsonl"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def cubin(self, digest: str) -> Path:
        """Where the cubin of a compile whose key hashes to `digest` (sha256 hex) lives."""
        return self.cubin_root / digest[:2] / f"{digest}.cubin"

    def ceilings(self, device_name: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "-", device_name).strip("-")
        return self.root / f"ceilings-{safe}.json"


def shipped_cache_dir() -> Path | None:
    """The repository's `cache/` folder of shipped bundles, where kernelpro runs from a checkout
    (the README's editable install); None in an installed wheel, which does not carry it."""
    found = Path(__file__).resolve().parents[1] / "cache"
    return found if found.is_dir() else None


def atomic_write(path: PathLike, data: bytes | str, mode: int = 0o644) -> None:
    """Write `data` (str as UTF-8) to `path` through a temporary file in the same directory,
    fsync'd and renamed over it; the parent directory is created if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes it 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class UnsafeDirectory(PermissionError):
    """A directory kernelpro would keep code in (generated modules, cubins, host libraries) is
    not private to this user."""


def unsafe_reason(directory: PathLike) -> str | None:
    """Why `directory` must not hold code we import or load (another owner, a link, group or
    other write permission), or None when it is ours alone."""
    try:
        st = os.lstat(directory)
    except OSError as e:
        return f"cannot stat it ({e})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory (a link or a file)"
    if st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"its mode {stat.S_IMODE(st.st_mode):o} lets other users write to it"
    return None


def private_dir(directory: PathLike) -> Path:
    """`directory`, created 0700 if missing (its parents as usual); an existing one is used
    only if it passes `unsafe_reason`. Raises UnsafeDirectory otherwise, OSError when it cannot
    be made."""
    path = Path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    problem = unsafe_reason(path)
    if problem:
        raise UnsafeDirectory(f"{path}: not used for code kernelpro builds or imports: {problem}")
    return path


_FRESH: dict[Path, Path] = {}  # a directory refused by private_or_fresh -> its stand-in


def private_or_fresh(directory: PathLike, prefix: str) -> Path:
    """`private_dir(directory)`, or where that fails (another user could write there, it cannot
    be made) a fresh private directory, logged once and the same for the rest of the process,
    so another local user cannot plant code where kernelpro looks for its own."""
    path = Path(directory)
    if path in _FRESH:
        return _FRESH[path]
    try:
        return private_dir(path)
    except OSError as e:
        fresh = _FRESH[path] = Path(tempfile.mkdtemp(prefix=prefix))
        log.warning("%s; using %s instead", e, fresh)
        return fresh


@functools.lru_cache(maxsize=1)
def codegen_dir() -> Path:
    """The per-user directory generated modules are written to and imported from:
    $TMPDIR/kernelpro-codegen-<uid> if it is private to this user, else a fresh private
    directory (logged once)."""
    shared = Path(tempfile.gettempdir()) / f"kernelpro-codegen-{os.getuid()}"
    return private_or_fresh(shared, "kernelpro-codegen-")
