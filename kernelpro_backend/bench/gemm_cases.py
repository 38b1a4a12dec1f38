"""The GEMM sweep's cases (bench/gemm_sweep.py runs them): what the [gemm] issue asks a sweep
to cover, each a small nn.Module whose GEMM subgraph the backend cuts.

Owns: `Case`, `cases(tiny, problems)`. Groups: "square" (1k-8k plain matmuls in bf16, fp16, IEEE
fp32 and tf32x3), "training" (a transformer MLP's forward, input-gradient and weight-gradient
GEMMs and a QKV projection, bf16), "epilogue" (GEMM + two or more fused ops, bf16), "long_k"
(small outputs over a long K: a small layer's and a LoRA adapter's weight gradients, a float32
256x256 output over K = 131072, a batch-1 decode step's projection), "kernelbench" (the GEMM
problems of a KernelBench directory, float32 as written, and some in bf16 and tf32x3).
Must not: time or build anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .problems import load_problem

DEVICE = "cuda"
Factory = Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# KernelBench GEMM problems: (file name prefix, variants as (dtype label, precision))
KERNELBENCH = (
    ("L1_2_", (("fp32", "ieee"), ("fp32", "tf32x3"), ("bf16", "ieee"))),
    ("L1_8_", (("fp32", "ieee"), ("fp32", "tf32x3"))),
    ("L1_9_", (("fp32", "ieee"),)),
    ("L2_9_", (("fp32", "ieee"), ("fp32", "tf32"), ("bf16", "ieee"))),
    ("L2_59_", (("fp32", "ieee"), ("fp32", "tf32"), ("bf16", "ieee"))),
    ("L2_56_", (("fp32", "ieee"),)),
)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    group: str
    precision: str  # kernelpro's float32 policy for the case: ieee | tf32 | tf32x3
    make: Factory

    @property
    def torch_precision(self) -> str:
        """torch.set_float32_matmul_precision for capture and baselines: tf32x3 is measured
        against IEEE float32 (its promise), tf32 against PyTorch's own TF32."""
        return "high" if self.precision == "tf32" else "highest"


class MatMul(nn.Module):
    """x @ w with a row-major [K, N] weight (B read along N)."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n) / k**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


class WeightGrad(nn.Module):
    """a^T @ b: the weight gradient of a linear layer (A read transposed, K the token count)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.t() @ b


class LinearResidual(nn.Module):
    """linear(x) + r: a down projection with its bias and the residual add."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + r


class HeadSplit(nn.Module):
    """q, k, v of a QKV projection split into heads and made contiguous ([B, H, S, D/H])."""

    def __init__(self, d: int, heads: int, seq: int) -> None:
        super().__init__()
        self.qkv, self.heads, self.seq = nn.Linear(d, 3 * d, bias=False), heads, seq

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t, d = x.shape
        b, s, h = t // self.seq, self.seq, self.heads
        parts = self.qkv(x).split(d, dim=1)
        return tuple(p.view(b, s, h, d // h).transpose(1, 2).contiguous() for p in parts)


class LinearSiluScale(nn.Module):
    """silu(linear(x)) * 2: bias, SiLU and a scale after the GEMM."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.linear = nn.Linear(k, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.linear(x)) * 2.0


def _make(module: nn.Module, dtype: torch.dtype, *shapes: tuple[int, ...]) -> Factory:
    def factory() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        model = module.to(DEVICE, dtype)
        return model, tuple(torch.randn(*s, device=DEVICE, dtype=dtype) for s in shapes)

    return factory


def _square(s: int) -> list[Case]:
    found = []
    for size in (1024,) if s > 1 else (1024, 2048, 4096, 8192):
        n = size // s
        for label, dtype, precision in (
            ("bf16", torch.bfloat16, "ieee"),
            ("fp16", torch.float16, "ieee"),
            ("fp32", torch.float32, "ieee"),
            ("tf32", torch.float32, "tf32"),  # the user allowed TF32: against cuBLAS's TF32
            ("tf32x3", torch.float32, "tf32x3"),
        ):
            make = _make(MatMul(n, n), dtype, (n, n))
            found.append(Case(f"{label} mm {n}^3", "square", precision, make))
    return found


def _training(s: int) -> list[Case]:
    bf16 = torch.bfloat16
    t, d, h = 8192 // s, 1024 // s, 4096 // s  # tokens, width, MLP hidden
    return [
        Case(f"bf16 fwd qkv {t}x{d}->{3 * d}", "training", "ieee",
             _make(nn.Linear(d, 3 * d, bias=False), bf16, (t, d))),
        Case(f"bf16 dgrad {t}x{h}->{d}", "training", "ieee", _make(MatMul(h, d), bf16, (t, h))),
        Case(f"bf16 wgrad {d}x{t}->{h}", "training", "ieee",
             _make(WeightGrad(), bf16, (t, d), (t, h))),
    ]  # fmt: skip


def _epilogue(s: int) -> list[Case]:
    bf16 = torch.bfloat16
    t, d, h = 8192 // s, 1024 // s, 4096 // s
    return [
        Case(f"bf16 linear+bias+gelu {t}x{d}->{h}", "epilogue", "ieee",
             _make(nn.Sequential(nn.Linear(d, h), nn.GELU()), bf16, (t, d))),
        # float32 with TF32 allowed (torch.set_float32_matmul_precision("high")), as many
        # float32 training scripts set it: against cuBLAS's TF32 GEMM and Inductor's epilogue
        Case(f"tf32 linear+bias+gelu {t}x{d}->{h}", "epilogue", "tf32",
             _make(nn.Sequential(nn.Linear(d, h), nn.GELU()), torch.float32, (t, d))),
        Case(f"bf16 linear+bias+residual {t}x{h}->{d}", "epilogue", "ieee",
             _make(LinearResidual(h, d), bf16, (t, h), (t, d))),
        Case(f"bf16 linear+bias+silu*2 {t}x{d}->{h}", "epilogue", "ieee",
             _make(LinearSiluScale(d, h), bf16, (t, d))),
        Case(f"bf16 qkv head split {t}x{d}->3x{d}", "epilogue", "ieee",
             _make(HeadSplit(d, max(1, d // 64), max(1, t // 8)), bf16, (t, d))),
    ]  # fmt: skip


def _long_k(s: int) -> list[Case]:
    """GEMMs whose output is small next to K: one program per tile leaves most SMs idle
    (the split-K seed's cases; a decode step's GEMV reads its weight at a quarter of the SMs)."""
    bf16 = torch.bfloat16
    t, w, d, r = 8192 // s, 512 // s, 4096 // s, 16  # tokens, a small width, a wide one, rank
    mn, k = 256 // s, 131072 // s
    return [
        Case(f"bf16 wgrad {w}x{t}->{w}", "long_k", "ieee",
             _make(WeightGrad(), bf16, (t, w), (t, w))),
        Case(f"bf16 lora wgrad {r}x{t}->{d}", "long_k", "ieee",
             _make(WeightGrad(), bf16, (t, r), (t, d))),
        Case(f"fp32 mm {mn}x{k}->{mn}", "long_k", "ieee",
             _make(MatMul(k, mn), torch.float32, (mn, k))),
        Case(f"bf16 decode 1x{d}->{d}", "long_k", "ieee",  # batch-1 inference: a GEMV
             _make(nn.Linear(d, d, bias=False), bf16, (1, d))),
    ]  # fmt: skip


def _kernelbench(directory: Path) -> list[Case]:
    found = []
    for prefix, variants in KERNELBENCH:
        paths = sorted(directory.glob(f"{prefix}*.py"))
        if not paths:
            continue
        for label, precision in variants:

            def make(path: Path = paths[0], dtype: torch.dtype = DTYPES[label]) -> tuple:
                work = load_problem(path, torch.device(DEVICE), dtype)
                return work.model, tuple(work.inputs)

            name = f"{label if precision == 'ieee' else precision} {paths[0].stem}"
            found.append(Case(name, "kernelbench", precision, make))
    return found


def cases(tiny: bool, problems: str | None = None) -> list[Case]:
    """Every case; `tiny` divides sizes by 16 (the CPU smoke run, which has no KernelBench)."""
    s = 16 if tiny else 1
    found = _square(s) + _training(s) + _epilogue(s) + _long_k(s)
    if problems and not tiny:
        found += _kernelbench(Path(problems))
    return found
