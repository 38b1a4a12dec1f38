"""How kernelpro speaks to the user outside the command line: its logger tree and its warnings.

Owns: the one logger tree ("kernelpro" and its children "kernelpro.cache", "kernelpro.warmup",
...), whose messages carry no prefix of their own: the name in front comes from the format, so
it appears once whatever prints it (a program's `logging.basicConfig`, `TORCH_LOGS=kernelpro`,
or `LastResort` below for a program that configured nothing); `warn`, a `warnings.warn` that
names the user's line (the first frame outside kernelpro, torch and Python's standard
library), not kernelpro's.
Must not: import anything of the package (every layer logs), configure the program's logging
(the command line does that for itself, cli/main.py), or filter what other handlers print.

`TORCH_LOGS=kernelpro` (INFO) and `TORCH_LOGS=+kernelpro` (DEBUG) work through torch's own
rule for module names: the top-level module `kernelpro` (kernelpro.py, beside this package)
makes the name importable, so `import torch` accepts it and gives the "kernelpro" logger its
handler. The logger is not registered with `torch._logging.register_log`: a registered log is
taken over by every later `torch._logging.set_logs` (propagation off), and the program's own
handlers and pytest's caplog would stop seeing kernelpro's records.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from types import FrameType

LOGGER = "kernelpro"  # the root of the tree; modules log to it or to "kernelpro.<part>"
FORMAT = "%(name)s: %(message)s"  # "kernelpro: ...", "kernelpro.warmup: ..."

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB = os.path.dirname(os.path.abspath(os.__file__))
_SITE = re.compile(r"[/\\](site|dist)-packages[/\\]")


class LastResort(logging.Handler):
    """Python's `logging.lastResort` for kernelpro's tree — warnings and errors to stderr when
    the program configured no logging — with the logger's name in front (the messages have no
    prefix). Silent as soon as any other handler is on the record's way (the program's logging
    configuration, TORCH_LOGS' handler, pytest's caplog), as `lastResort` is."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        if self._others_on_the_way(record):
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)

    def _others_on_the_way(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False


def install() -> None:
    """Put `LastResort` on the "kernelpro" logger, once per process."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(h, LastResort) for h in logger.handlers):
        logger.addHandler(LastResort())


def _inside(filename: str) -> bool:
    """Whether a frame's file is kernelpro's, torch's or Python's own (its standard library,
    whose `contextlib` and `functools` frames sit between torch's; frozen import machinery)
    rather than the user's. A library the user calls through (in site-packages) is the user's."""
    if filename.startswith("<frozen "):
        return True
    path = os.path.abspath(filename)
    ours = [_PACKAGE_DIR]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        ours.append(os.path.dirname(os.path.abspath(torch_file)))
    if any(path.startswith(d + os.sep) for d in ours):
        return True
    return path.startswith(_STDLIB + os.sep) and not _SITE.search(path)


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message, category)` attributed to the user's line: the first frame
    outside kernelpro, torch and the standard library (Python 3.12's `skip_file_prefixes`,
    which 3.10 and 3.11 lack), else the caller of `warn` (all of a kernelpro command is
    kernelpro's)."""
    frame: FrameType | None = sys._getframe(1)  # warn's caller: stacklevel 2
    level = 2
    while frame is not None and _inside(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)
