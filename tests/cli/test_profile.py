"""`kernelpro profile` without a GPU: it says one is needed and exits non-zero."""

import argparse

import pytest
import torch

from kernelpro_backend.cli.profile import add_cli, run_cli


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cli_says_a_gpu_is_needed_and_exits_non_zero(capsys):
    parser = argparse.ArgumentParser(prog="kernelpro")
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["profile", "kernelpro_backend.examples:mlp"])
    assert args.func(args) == 2 and run_cli(args) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
