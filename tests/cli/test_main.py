import subprocess
import sys

import pytest
import torch

import kernelpro_backend
from kernelpro_backend.cli.main import main


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


def test_explain_names_the_templates_a_search_measures(capsys):
    """Each subgraph's row says what kernelpro generates for it: a GroupNorm's rows as the
    Triton row template and the row-resident CUDA kernel, a convolution none (and why)."""
    from kernelpro_backend import explain

    model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.GroupNorm(2, 8), torch.nn.SiLU()
    )
    rows = explain(model, torch.randn(2, 8, 64, 64))
    norm = next(r for r in rows if r.graph == "forward" and r.pattern == "norm")
    assert norm.templates == ("row_reduction", "row_cluster")
    conv = next(r for r in rows if r.kind == "conv")
    assert conv.templates[0].startswith("none: ") and "template" in conv.templates[0]
    assert main(["explain", "kernelpro_backend.examples:mlp"]) == 0
    assert "templates" in capsys.readouterr().out.splitlines()[0]


def test_explain_bad_target():
    proc = subprocess.run(
        [sys.executable, "-m", "kernelpro_backend.cli", "explain", "no_such_module:fn"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "cannot import" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only demo")
def test_demo_on_cpu_says_search_needs_a_gpu_and_claims_no_speedup(capsys):
    """Without a GPU nothing is replaced, so the demo must not print a speedup for kernelpro."""
    from kernelpro_backend.demo import run_demo

    assert run_demo(steps=2) == 0  # 0: kernelpro's first loss matched eager's
    out = capsys.readouterr().out
    assert "kernel search needs one" in out and "replaced 0" in out
    assert "not a kernelpro speedup" in out and "x over Inductor" not in out
