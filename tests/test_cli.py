import subprocess
import sys

import kernelpro_backend
from kernelpro_backend.cli import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert kernelpro_backend.__version__ in capsys.readouterr().out


def test_help_lists_commands(capsys):
    try:
        main(["--help"])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    assert "explain" in out and "demo" in out


def test_explain_prints_a_table(capsys):
    assert main(["explain", "kernelpro_backend.examples:mlp"]) == 0
    out = capsys.readouterr().out
    assert "forward" in out and "backward" in out and "gemm" in out and "addmm+epilogue" in out


def test_explain_bad_target():
    proc = subprocess.run(
        [sys.executable, "-m", "kernelpro_backend.cli", "explain", "no_such_module:fn"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "cannot import" in proc.stderr
