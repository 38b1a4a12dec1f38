"""Cache keys: stable across processes, different whenever shape, dtype, arch, toolchain or
schema differ."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from graphs import linear_softmax_subgraph, tanh_subgraph, with_arch

from kernelpro_backend.cache import CacheKey, cache_key, current_toolchain

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def test_same_subgraph_same_key_in_another_process(linear_sg, tanh_sg):
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from graphs import linear_softmax_subgraph, tanh_subgraph;"
        "from kernelpro_backend.cache import cache_key;"
        "print(json.dumps([cache_key(linear_softmax_subgraph().key).digest,"
        " cache_key(tanh_subgraph().key).digest]))"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED="12345")
    done = subprocess.run(
        [sys.executable, "-c", code, str(HERE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = [cache_key(linear_sg.key).digest, cache_key(tanh_sg.key).digest]
    assert theirs == ours
    assert ours[0] != ours[1]


def test_retracing_gives_the_same_key(tanh_sg):
    assert cache_key(tanh_subgraph().key) == cache_key(tanh_sg.key)


def test_shape_dtype_arch_precision_schema_change_the_key(linear_sg):
    base = cache_key(linear_sg.key)
    variants = {
        "shape": cache_key(linear_softmax_subgraph(m=5).key),
        "dtype": cache_key(linear_softmax_subgraph(dtype=torch.float64).key),
        "arch": with_arch(base, "sm_90"),
        "precision": cache_key(dataclasses.replace(linear_sg.key, precision="tf32")),
        "schema": dataclasses.replace(base, schema=base.schema + 1),
    }
    digests = {name: k.digest for name, k in variants.items()}
    assert base.digest not in digests.values()
    assert len(set(digests.values())) == len(digests)


def test_the_toolchain_and_gpu_model_are_not_in_the_key(linear_sg):
    """They change how fast a kernel runs, not which kernel computes the subgraph: an entry
    made under torch 2.11 is found under torch 2.13 (and re-proved there before use)."""
    text = cache_key(linear_sg.key).to_json()
    assert "toolchain" not in text and torch.__version__ not in text
    assert set(json.loads(text)) == {"subgraph", "schema"}


def test_key_json_round_trip(linear_sg):
    key = cache_key(linear_sg.key)
    again = CacheKey.from_json(key.to_json())
    assert again == key
    assert again.digest == key.digest


def test_toolchain_reports_none_for_missing_cuda():
    tc = current_toolchain()
    assert tc.torch == torch.__version__
    expected_cuda = torch.version.cuda or "none"
    assert tc.cuda == expected_cuda


def test_the_generator_version_names_the_package_and_its_code():
    from kernelpro_backend.version import __version__, generator_version

    version = generator_version()
    assert version.startswith(__version__ + "+") and len(version.split("+")[1]) == 12
    assert current_toolchain().generator == version
