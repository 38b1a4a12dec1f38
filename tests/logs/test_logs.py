"""kernelpro's logging and warnings (kernelpro_backend/logs/): one prefix whatever prints the
records, warnings that name the user's line, TORCH_LOGS=kernelpro / +kernelpro."""

from __future__ import annotations

import ast
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import kernelpro_backend
from kernelpro_backend.logs import LastResort
from kernelpro_backend.options import Options

PACKAGE = Path(kernelpro_backend.__file__).parent
REPO = PACKAGE.parent
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}

# A CPU compile that logs the no-CUDA warning and the inference graph's INFO line.
SCRIPT = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
with torch.no_grad():
    torch.compile(model, backend="kernelpro", options={"fallback": "eager"})(torch.randn(4, 8))
"""


def _log_messages() -> list[tuple[str, int, str]]:
    """(file, line, the literal start of the message) of every log call in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LEVELS and node.args):  # fmt: skip
                continue
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) and first.values:
                first = first.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((str(path.relative_to(REPO)), node.lineno, first.value))
    return found


def test_no_log_message_carries_a_kernelpro_prefix_of_its_own():
    """The format puts the logger's name in front ("WARNING:kernelpro:...", "kernelpro.cache:
    ..."); a message that starts with "kernelpro" too would print it twice."""
    messages = _log_messages()
    assert len(messages) > 50  # the scan sees the package's log calls
    doubled = [m for m in messages if re.match(r"kernelpro[ :.]", m[2])]
    assert not doubled, doubled


def test_every_logger_is_in_the_kernelpro_tree():
    """TORCH_LOGS=kernelpro and a program's `getLogger("kernelpro").setLevel(...)` reach every
    message only if every logger is "kernelpro" or one of its children."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        names |= set(re.findall(r"logging\.getLogger\(([^)]*)\)", path.read_text()))
    names -= {"LOGGER", "record.name"}  # logs/ itself
    assert names and all(re.fullmatch(r'"kernelpro(\.\w+)?"', n) for n in names), names


def test_a_program_with_a_basic_config_sees_one_prefix(caplog):
    if torch.cuda.is_available():
        pytest.skip("the no-CUDA warning is the CPU's")
    from kernelpro_backend.backend import _warn_no_cuda_once

    _warn_no_cuda_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        _warn_no_cuda_once()
    (record,) = [r for r in caplog.records if "no CUDA GPU" in r.getMessage()]
    line = logging.Formatter(logging.BASIC_FORMAT).format(record)
    assert line.startswith("WARNING:kernelpro:no CUDA GPU here"), line
    assert line.count("kernelpro") == 1, line


def test_the_last_resort_handler_is_silent_when_another_handler_sees_the_record(capsys):
    logger = logging.getLogger("kernelpro.test_logs")
    (resort,) = [h for h in logging.getLogger("kernelpro").handlers if isinstance(h, LastResort)]
    record = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, "careful", (), None)
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = []  # a program that configured nothing (pytest's own handlers set aside)
    try:
        resort.handle(record)
        assert capsys.readouterr().err == "kernelpro.test_logs: careful\n"
        root.addHandler(logging.NullHandler())  # a program's own configuration
        resort.handle(record)
        assert capsys.readouterr().err == ""
    finally:
        root.handlers = saved


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("TORCH_LOGS", "KERNELPRO_"))
    }
    environ["PYTHONPATH"] = os.pathsep.join([str(REPO), environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env={**environ, **env}, timeout=300, cwd=REPO.parent)  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA warning is the CPU's")
def test_a_program_that_configured_no_logging_sees_kernelpro_once_per_line():
    run = _run({})
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if "no CUDA GPU" in line]
    assert lines == [lines[0]] and lines[0].startswith("kernelpro: no CUDA GPU here"), run.stderr
    assert "kernelpro: kernelpro" not in run.stderr and "graph:" not in run.stderr  # INFO: off


@pytest.mark.parametrize(("setting", "debug"), [("kernelpro", False), ("+kernelpro", True)])
def test_torch_logs_turns_the_kernelpro_logger_on(setting, debug):
    """`import torch` accepts the name (kernelpro.py makes it a module), torch's handler prints
    the INFO line of each compiled graph, and the last-resort handler stays silent."""
    run = _run({"TORCH_LOGS": setting})
    assert run.returncode == 0, run.stderr
    assert re.search(r"\] (\[0/0\] )?inference graph: 1 subgraphs, 0 replaced$", run.stderr, re.M)
    assert "kernelpro: " not in run.stderr  # the last resort did not print it a second time
    level = logging.getLevelName(logging.DEBUG if debug else logging.INFO)
    probe = "import torch, logging; print(logging.getLogger('kernelpro').level)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "TORCH_LOGS": setting, "PYTHONPATH": str(REPO)},
                         timeout=120, check=True).stdout  # fmt: skip
    assert logging.getLevelName(int(out)) == level


def test_options_warnings_name_the_users_line(monkeypatch):
    """Through torch.compile (Dynamo's and kernelpro's frames between), a misspelt variable's
    warning points at the line that ran the compiled model, here."""
    monkeypatch.setenv("KERNELPRO_FALBACK", "eager")
    model = torch.nn.Linear(4, 4)
    compiled = torch.compile(model, backend="kernelpro", options={"fallback": "eager"})
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        compiled(torch.randn(2, 4))
    (w,) = [w for w in caught if "KERNELPRO_FALBACK" in str(w.message)]
    assert "did you mean KERNELPRO_FALLBACK" in str(w.message)
    assert (w.filename, w.lineno) == (__file__, line)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        Options.resolve()
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
