"""GPU tier: the generated kernels compiled by Triton for the real device (no interpreter),
through the GPU script's smoke mode, and both GEMM load paths. Skipped cleanly without CUDA;
the GEMM sweep script's logic also runs here at tiny sizes in the interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_script_smoke(tmp_path: os.PathLike) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(OUT=str(tmp_path), PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "gpu_codegen.py"), "--quick"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert os.path.exists(os.path.join(tmp_path, "gpu_codegen.json"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("loads", ["pointer", "tma"])
def test_gemm_loads_compile_and_match_on_gpu(loads: str) -> None:
    """Both main-loop load paths compiled for the device, at an even and an odd shape."""
    sys.path.insert(0, os.path.dirname(__file__))
    from harness import check, traced_subgraph

    from kernelpro_backend.codegen import lower

    for m, n, k in ((512, 384, 256), (520, 392, 264)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        sg = traced_subgraph(lambda x, y: (torch.mm(x, y).relu(),), (a, b), "gemm")
        check(sg, lower(sg).with_knobs(LOADS=loads))


def test_gemm_sweep_script_runs_in_the_interpreter(tmp_path: os.PathLike) -> None:
    """The H100 sweep's logic (capture, configs, correctness, table) at tiny sizes on the CPU."""
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=ROOT, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "gpu_gemm_sweep.py"), "--cpu-smoke", "--max-configs", "2"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(tmp_path, "gpu_gemm_sweep.json")) as f:
        results = __import__("json").load(f)["results"]
    assert [c["case"].split()[0] for c in results] == ["bf16", "bf16", "bf16", "tf32"]
    assert all(r["status"] == "ok" for c in results for r in c["configs"])
    assert results[-1]["precision"] == "tf32"
