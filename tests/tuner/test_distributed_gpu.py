"""On one GPU, two ranks (gloo): DDP training with backend="kernelpro" and search on a miss
installs the same kernels on both ranks and matches DDP without kernelpro; the distributed
warm-up (`kernelpro warmup --nproc 2`) fills both ranks' caches with the same keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelpro_backend.cache import KernelCache

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

ROOT = Path(__file__).resolve().parents[2]


def test_ddp_training_with_search_on_a_miss_on_two_ranks(tmp_path):
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        str(ROOT / "scripts" / "distributed_check.py"), "--example", "mlp", "--out", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    print(f"\n{summary}")
    assert summary["same_kernels_on_every_rank"] and summary["losses_match_ddp_without_kernelpro"]
    caches = [
        sorted(e.key.digest for e in KernelCache(tmp_path / f"cache{r}").entries()) for r in (0, 1)
    ]
    assert caches[0] == caches[1]  # every winner reached both ranks


def test_distributed_warmup_cli_on_two_ranks(tmp_path):
    cmd = [
        sys.executable, "-m", "kernelpro_backend.cli", "warmup", "kernelpro_backend.examples:mlp",
        "--nproc", "2", "--budget-s", "3", "--max-trials", "3", "--cache-dir", str(tmp_path / "c"),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    print(f"\n{done.stdout[-1500:]}")
    assert "subgraphs," in done.stdout  # rank 0's summary, once
    assert done.stdout.count("subgraphs,") == 1
