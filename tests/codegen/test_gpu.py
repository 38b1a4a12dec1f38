"""GPU tier: the generated kernels compiled by Triton for the real device (no interpreter):
every template's default spec at moderate sizes, and both GEMM load paths. Skipped cleanly
without CUDA; the GEMM sweep's logic (bench/gemm_sweep.py) also runs here at tiny sizes in
the interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


# Every template at moderate sizes (1024^3 GEMMs, 2048x2048 rows, 8000-word vocabulary,
# 512-token attention): the default spec compiled for the device and checked against the
# subgraph's reference on fresh inputs, tolerance by dtype.
N, ROWS, COLS, VOCAB, SEQ = 1024, 2048, 2048, 8000, 512


class _CrossEntropy(nn.Module):
    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, t)


def _biggest(model: nn.Module, *inputs: torch.Tensor, kind: str | None = None):
    from kernelpro_backend.explain import find_subgraphs

    found = [s for s in find_subgraphs(model, *inputs, train=False) if kind in (None, s.kind)]
    return max(found, key=lambda s: sum(torch.Size(m[0]).numel() for m in s.input_meta))


def _template_case(name: str):
    from harness import traced_subgraph

    from kernelpro_backend.examples import RMSNorm

    f32, bf16, dev = torch.float32, torch.bfloat16, "cuda"
    rows = lambda dt: torch.randn(ROWS, COLS, device=dev, dtype=dt)  # noqa: E731
    if name.startswith("linear+gelu"):
        dt = f32 if name.endswith("fp32") else bf16
        model = nn.Sequential(nn.Linear(N, N), nn.GELU()).to(dev, dt)
        return _biggest(model, torch.randn(N, N, device=dev, dtype=dt), kind="gemm")
    if name == "cross-entropy bf16":
        x = torch.randn(ROWS, VOCAB, device=dev, dtype=bf16)
        t = torch.randint(0, VOCAB, (ROWS,), device=dev)
        return _biggest(_CrossEntropy(), x, t, kind="reduction")
    if name.startswith("attention"):
        # The partitioner skips SDPA forward ops (tagged nondeterministic_seeded): trace it whole.
        d, causal = (64, True) if "causal" in name else (128, False)
        qkv = [torch.randn(2, 16, SEQ, d, device=dev, dtype=bf16) for _ in range(3)]
        sdpa = lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=causal),)  # noqa: E731
        return traced_subgraph(sdpa, qkv, "attention")
    op, dtype = name.split()
    dt = f32 if dtype == "fp32" else bf16
    module = {"layernorm": nn.LayerNorm(COLS), "rmsnorm": RMSNorm(COLS), "softmax": nn.Softmax(-1)}
    return _biggest(module[op].to(dev, dt), rows(dt))


TEMPLATE_CASES = [
    "linear+gelu fp32", "linear+gelu bf16", "layernorm fp32", "layernorm bf16", "rmsnorm fp32",
    "softmax fp32", "softmax bf16", "cross-entropy bf16", "attention d64 causal",
    "attention d128",
]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", TEMPLATE_CASES)
def test_default_spec_of_each_template_compiles_and_matches_on_gpu(name: str) -> None:
    from harness import check

    sg = _template_case(name)
    assert sg.device.type == "cuda"
    check(sg, seed=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("loads", ["pointer", "tma"])
def test_gemm_loads_compile_and_match_on_gpu(loads: str) -> None:
    """Both main-loop load paths compiled for the device, at an even and an odd shape."""
    sys.path.insert(0, os.path.dirname(__file__))
    from harness import check, traced_subgraph

    from kernelpro_backend.lowering import lower

    for m, n, k in ((512, 384, 256), (520, 392, 264)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        sg = traced_subgraph(lambda x, y: (torch.mm(x, y).relu(),), (a, b), "gemm")
        check(sg, lower(sg).with_knobs(LOADS=loads))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("loads", ["pointer", "tma"])
def test_split_k_gemm_matches_and_is_bit_identical_run_to_run_on_gpu(loads: str) -> None:
    """A weight gradient's shape (small output, long K) with K split 8 ways and a GELU after
    the partials: checked against the reference and run twice on the same inputs."""
    sys.path.insert(0, os.path.dirname(__file__))
    from harness import check, traced_subgraph

    from kernelpro_backend.lowering import lower
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    x = torch.randn(8192, 512, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(8192, 384, device="cuda", dtype=torch.bfloat16)
    sg = traced_subgraph(lambda a, b: (F.gelu(torch.mm(a.t(), b)),), (x, dy), "gemm")
    spec = check(sg, lower(sg).with_knobs(LOADS=loads, SPLIT_K=8, PERSISTENT=False), seed=2)
    inputs = sg.make_inputs(3, "cuda")
    kernel = build_kernel(spec)
    (first,), (second,) = kernel(*inputs), kernel(*inputs)
    assert torch.equal(first, second)


def _float32_gemm(m: int, n: int, k: int, epilogue: bool, precision: str):  # type: ignore[no-untyped-def]
    """(subgraph, its library form under `precision`, fresh inputs, float64 result) of an
    m x n x k float32 GEMM with nn.Linear's weight layout (with `epilogue`: bias + GELU on the
    accumulator)."""
    import dataclasses

    sys.path.insert(0, os.path.dirname(__file__))
    from harness import traced_subgraph

    from kernelpro_backend.codegen import alternatives
    from kernelpro_backend.lowering import lower

    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda").t()  # nn.Linear's weight layout
    bias = torch.randn(n, device="cuda")
    if epilogue:
        sg = traced_subgraph(lambda x, y, c: (F.gelu(torch.mm(x, y) + c),), (a, b, bias), "gemm")
    else:
        sg = traced_subgraph(lambda x, y: (torch.mm(x, y),), (a, b), "gemm")
    seed = dataclasses.replace(lower(sg), precision=precision)
    (alt,) = [s for s in alternatives(seed) if s.template == "gemm_library"]
    inputs = sg.make_inputs(1, "cuda")  # in the subgraph's order, fresh values
    (exact,) = sg.module()(*[x.double() for x in inputs])
    return sg, alt, inputs, exact


def _under(precision: str, fn):  # type: ignore[no-untyped-def]
    """fn() with PyTorch's float32 matmul precision set to `precision`."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        return fn()
    finally:
        torch.set_float32_matmul_precision(old)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("m", "n", "k", "epilogue"),
    [(1024, 768, 1000, False), (2048, 2048, 2048, False), (1024, 768, 1000, True)],
)
def test_tf32x3_gemm_is_at_least_as_accurate_as_ieee_on_gpu(
    m: int, n: int, k: int, epilogue: bool
) -> None:
    """The tf32x3 library form against float64, beside IEEE cuBLAS on the same inputs (with
    `epilogue`: bias + GELU on the accumulator)."""
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    sg, alt, inputs, exact = _float32_gemm(m, n, k, epilogue, "tf32x3")
    (got,) = build_kernel(alt)(*inputs)
    (ieee,) = _under("highest", lambda: sg.module()(*inputs))
    err = float((got.double() - exact).abs().max())
    ieee_err = float((ieee.double() - exact).abs().max())
    assert err <= ieee_err, (err, ieee_err)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    ("m", "n", "k", "epilogue"),
    [(1024, 768, 1000, False), (2048, 2048, 2048, False), (1024, 768, 1000, True)],
)
def test_tf32_form_rounds_as_cublas_on_gpu(m: int, n: int, k: int, epilogue: bool) -> None:
    """The tf32 library form against float64, beside cuBLAS's TF32 GEMM (PyTorch's "high"
    precision) on the same inputs: as accurate as cuBLAS (operands rounded to nearest, as it
    rounds them), and clearly more accurate than the product of truncated operands (what
    Triton's TF32 dot would compute from raw float32)."""
    from kernelpro_backend.codegen.templates.library import library_epilogue
    from kernelpro_backend.runtime.spec_kernel import build_kernel

    sg, alt, inputs, exact = _float32_gemm(m, n, k, epilogue, "tf32")
    assert library_epilogue(alt) == "tf32"
    (got,) = build_kernel(alt)(*inputs)
    truncate = [
        (x.view(torch.int32) & -8192).view(torch.float32) if x.dim() == 2 else x for x in inputs
    ]
    (truncated,) = sg.module()(*[x.double() for x in truncate])
    (cublas,) = _under("high", lambda: sg.module()(*inputs))
    err = float((got.double() - exact).abs().max())
    cublas_err = float((cublas.double() - exact).abs().max())
    truncated_err = float((truncated - exact).abs().max())
    assert err <= 1.2 * cublas_err and err < 0.8 * truncated_err, (
        err,
        cublas_err,
        truncated_err,
    )


def test_gemm_sweep_runs_in_the_interpreter(tmp_path: os.PathLike) -> None:
    """The H100 sweep's logic (capture, configs, correctness, table) at tiny sizes on the CPU."""
    env = dict(os.environ, OUT=str(tmp_path), PYTHONPATH=ROOT, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "kernelpro_backend.cli.sweeps", "gemm-sweep", "--cpu-smoke", "--max-configs", "2"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(os.path.join(tmp_path, "gpu_gemm_sweep.json")) as f:
        results = __import__("json").load(f)["results"]
    assert [c["case"].split()[0] for c in results[:5]] == ["bf16", "fp16", "fp32", "tf32", "tf32x3"]
    assert {c["group"] for c in results} == {"square", "training", "epilogue", "long_k"}
    assert all(r["status"] == "ok" for c in results for r in c["configs"])
    by_name = {c["case"].split()[0] + c["group"]: c for c in results}
    assert by_name["tf32x3square"]["precision"] == "tf32x3"
    assert by_name["fp32square"]["precision"] == "ieee"
    assert by_name["tf32square"]["precision"] == "tf32"
    # under tf32x3 each config's error against float64 is recorded beside IEEE eager's
    assert all("eager_max_abs_error" in r for r in by_name["tf32x3square"]["configs"])
    # the epilogue cases fuse their ops into the GEMM subgraph
    epilogues = [c["pattern"] for c in results if c["group"] == "epilogue"]
    assert all(p != "mm" for p in epilogues), epilogues
