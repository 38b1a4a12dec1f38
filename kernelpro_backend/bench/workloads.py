"""The bench's built-in workloads: training steps of whole models and op-level problems.

Owns: one function per workload, `(device, dtype, size) -> Workload`, with its shapes at
"tiny" (CPU tests, milliseconds per step) and "full" (GPU, sizes people train at), the
`WORKLOADS` registry the CLI picks from (with the real-model corpus of bench/library/ and the
conv sweep's layers of bench/conv_layers.py, run only when named: `NAMED_ONLY`), the `DTYPES`
it names, and `workload_builders` (names and a KernelBench directory -> what
`runner.run_workloads` builds one at a time).
Must not: time, compile or compare anything.

dtype None means the workload's default: bfloat16 on CUDA for the GPT block, the MoE layer and
attention; float32 everywhere else (and always on the CPU), as in KernelBench.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from . import models
from .conv_layers import CONV_LAYERS
from .library import LIBRARY  # imports no library: its factories do
from .problems import PROBLEM_PREFIX, load_problem, problem_files
from .workload import Workload, WorkloadFactory, check_size, resolve_dtype
from .workload import adamw as _adamw


def _pick(size: str, tiny: dict[str, int], full: dict[str, int]) -> dict[str, int]:
    check_size(size)
    return tiny if size == "tiny" else full


def _mse_to_zero(out: object) -> torch.Tensor:
    assert isinstance(out, torch.Tensor)
    return out.float().pow(2).mean()


def _randn(*shape: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=dtype)


def gpt_block(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Training step of a GPT-2 style decoder block (bf16 on the GPU; batch 4, seq 2048,
    width 1024, 16 heads at "full")."""
    p = _pick(size, dict(b=2, t=16, d=32, h=2), dict(b=4, t=2048, d=1024, h=16))
    dt = resolve_dtype(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    model = models.GPTBlock(p["d"], p["h"]).to(device=device, dtype=dt)
    x = _randn(p["b"], p["t"], p["d"], device=device, dtype=dt)
    return Workload("gpt_block", model, (x,), dt, size, _mse_to_zero, _adamw)


def mlp(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Training step of a 2-block MLP (Linear -> LayerNorm -> GELU) with a linear head."""
    p = _pick(size, dict(n=16, d=32, hidden=64, out=8), dict(n=8192, d=1024, hidden=4096, out=1024))
    dt = resolve_dtype(device, dtype, torch.float32)
    torch.manual_seed(0)
    model = models.DeepMLP(p["d"], p["hidden"], p["out"]).to(device=device, dtype=dt)
    x = _randn(p["n"], p["d"], device=device, dtype=dt)
    return Workload("mlp", model, (x,), dt, size, _mse_to_zero, _adamw)


def convnet(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Training step of a 3-stage conv -> batchnorm -> ReLU net with cross-entropy loss."""
    p = _pick(size, dict(b=4, hw=8, w=4, classes=5), dict(b=128, hw=64, w=64, classes=100))
    dt = resolve_dtype(device, dtype, torch.float32)
    torch.manual_seed(0)
    model = models.SmallConvNet(p["w"], p["classes"]).to(device=device, dtype=dt)
    x = _randn(p["b"], 3, p["hw"], p["hw"], device=device, dtype=dt)
    labels = torch.randint(0, p["classes"], (p["b"],), device=device)

    def loss(out: object) -> torch.Tensor:
        assert isinstance(out, torch.Tensor)
        return F.cross_entropy(out.float(), labels)

    return Workload("convnet", model, (x,), dt, size, loss, _adamw)


def moe(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Training step of a mixture-of-experts layer: top-2 routing over 8 expert FFNs."""
    p = _pick(size, dict(b=2, t=16, d=32, hidden=64), dict(b=4, t=2048, d=1024, hidden=2816))
    dt = resolve_dtype(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    model = models.TopTwoMoE(p["d"], p["hidden"], experts=8).to(device=device, dtype=dt)
    x = _randn(p["b"], p["t"], p["d"], device=device, dtype=dt)
    return Workload("moe", model, (x,), dt, size, _mse_to_zero, _adamw)


def layer_norm(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """LayerNorm over the last dim with non-trivial affine weights."""
    p = _pick(size, dict(n=64, d=96), dict(n=16384, d=4096))
    dt = resolve_dtype(device, dtype, torch.float32)
    torch.manual_seed(0)
    model = models.LayerNormOp(p["d"]).to(device=device, dtype=dt)
    with torch.no_grad():  # non-trivial affine parameters, so a kernel that drops them fails
        model.norm.weight.normal_(1.0, 0.1)
        model.norm.bias.normal_(0.0, 0.1)
    x = _randn(p["n"], p["d"], device=device, dtype=dt)
    return Workload("layer_norm", model, (x,), dt, size)


def rms_norm(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """RMSNorm (float32 statistics) with a weight."""
    p = _pick(size, dict(n=64, d=96), dict(n=16384, d=4096))
    dt = resolve_dtype(device, dtype, torch.float32)
    torch.manual_seed(0)
    model = models.RMSNormOp(p["d"]).to(device=device, dtype=dt)
    x = _randn(p["n"], p["d"], device=device, dtype=dt)
    return Workload("rms_norm", model, (x,), dt, size)


def softmax(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Softmax over the last dim."""
    p = _pick(size, dict(n=64, d=100), dict(n=4096, d=16384))
    dt = resolve_dtype(device, dtype, torch.float32)
    x = _randn(p["n"], p["d"], device=device, dtype=dt) * 4
    return Workload("softmax", models.SoftmaxOp(), (x,), dt, size)


def cross_entropy(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Cross-entropy of logits against integer targets (mean)."""
    p = _pick(size, dict(n=32, v=50), dict(n=4096, v=32000))
    dt = resolve_dtype(device, dtype, torch.float32)
    torch.manual_seed(0)
    logits = _randn(p["n"], p["v"], device=device, dtype=dt) * 3
    targets = torch.randint(0, p["v"], (p["n"],), device=device)
    return Workload("cross_entropy", models.CrossEntropyOp(), (logits, targets), dt, size)


def gemm_bias_gelu(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """GEMM with a bias + GELU epilogue (nn.Linear then GELU)."""
    p = _pick(size, dict(m=48, k=40, n=56), dict(m=8192, k=4096, n=4096))
    dt = resolve_dtype(device, dtype, torch.float32)
    torch.manual_seed(0)
    model = models.GemmBiasGeluOp(p["k"], p["n"]).to(device=device, dtype=dt)
    x = _randn(p["m"], p["k"], device=device, dtype=dt)
    return Workload("gemm_bias_gelu", model, (x,), dt, size)


def _the_loss(out: object) -> torch.Tensor:
    assert isinstance(out, torch.Tensor)
    return out


def lm_head(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Training step of a language model's head and loss: 8192 tokens x width 1024 -> a
    32000-word vocabulary, cross-entropy (bf16 on the GPU)."""
    p = _pick(size, dict(n=16, d=32, v=300), dict(n=8192, d=1024, v=32000))
    dt = resolve_dtype(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    model = models.LMHeadLoss(p["d"], p["v"]).to(device=device, dtype=dt)
    hidden = _randn(p["n"], p["d"], device=device, dtype=dt)
    targets = torch.randint(0, p["v"], (p["n"],), device=device)
    return Workload("lm_head", model, (hidden, targets), dt, size, _the_loss, _adamw)


def _handwritten_gpt(
    name: str, device: torch.device, dtype: torch.dtype | None, size: str, tiny: dict, full: dict
) -> Workload:
    p = _pick(size, tiny, full)
    dt = resolve_dtype(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    model = models.HandwrittenGPT(p["vocab"], p["d"], p["h"], p["layers"], p["t"])
    model = model.to(device=device, dtype=dt)
    ids = torch.randint(0, p["vocab"], (p["b"], p["t"]), device=device)
    targets = torch.randint(0, p["vocab"], (p["b"], p["t"]), device=device)
    return Workload(name, model, (ids, targets), dt, size, _the_loss, _adamw)


def mini_gpt(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Training step of a GPT written as users write one ([training]: the LM head with its
    loss, hand-written attention, norms with their residuals): bf16 on the GPU; batch 4,
    sequence 1024, width 512, 8 heads, 4 layers, vocabulary 32768 at "full"."""
    return _handwritten_gpt(
        "mini_gpt", device, dtype, size,
        dict(b=2, t=16, d=32, h=2, layers=2, vocab=128),
        dict(b=4, t=1024, d=512, h=8, layers=4, vocab=32768),
    )  # fmt: skip


def gpt2_small(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """The same hand-written GPT at GPT-2 small's size, as nanoGPT trains it (12 layers, width
    768, 12 heads, sequence 1024, vocabulary 50304 = 50257 padded to a multiple of 64), batch
    8: an H100 step long enough that the GPU, not the host's launches, sets its time (bf16)."""
    return _handwritten_gpt(
        "gpt2_small", device, dtype, size,
        dict(b=2, t=16, d=48, h=2, layers=2, vocab=192),
        dict(b=8, t=1024, d=768, h=12, layers=12, vocab=50304),
    )  # fmt: skip


def attention(device: torch.device, dtype: torch.dtype | None, size: str) -> Workload:
    """Causal scaled-dot-product attention (bf16 on the GPU, where the flash kernels run)."""
    p = _pick(size, dict(b=2, h=2, t=16, hd=8), dict(b=4, h=16, t=2048, hd=64))
    dt = resolve_dtype(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    q, k, v = (_randn(p["b"], p["h"], p["t"], p["hd"], device=device, dtype=dt) for _ in "qkv")
    return Workload("attention", models.AttentionOp(), (q, k, v), dt, size)


WORKLOADS: dict[str, WorkloadFactory] = {
    "gpt_block": gpt_block,
    "mlp": mlp,
    "convnet": convnet,
    "moe": moe,
    "lm_head": lm_head,
    "mini_gpt": mini_gpt,
    "gpt2_small": gpt2_small,
    "layer_norm": layer_norm,
    "rms_norm": rms_norm,
    "softmax": softmax,
    "cross_entropy": cross_entropy,
    "gemm_bias_gelu": gemm_bias_gelu,
    "attention": attention,
    # The real-model corpus (bench/library/: transformers and torchvision, the `models` extra),
    # run only when named: "all" and the defaults are the built-in workloads above.
    **LIBRARY,
    # The conv sweep's layers (bench/conv_layers.py), also run only when named.
    **CONV_LAYERS,
}
TRAINING_WORKLOADS = ("gpt_block", "mlp", "convnet", "moe", "lm_head", "mini_gpt", "gpt2_small")
NAMED_ONLY = frozenset(LIBRARY) | frozenset(CONV_LAYERS)  # run only when named, not by "all"
OP_WORKLOADS = tuple(
    name for name in WORKLOADS if name not in TRAINING_WORKLOADS and name not in NAMED_ONLY
)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def workload_builders(
    names: Sequence[str],
    problems: str | None,
    device: torch.device,
    dtype: torch.dtype | None,
    size: str,
) -> list[tuple[str, Callable[[], Workload]]]:
    """(name, build) of the named workloads ("all" for all the built-in ones, not the library
    corpus; none named: all, or none when a problems directory is given), then of each problem
    file. Raises ValueError for an unknown name, ProblemError for a bad directory."""
    chosen = list(names or ([] if problems else ["all"]))
    if "all" in chosen:
        at = chosen.index("all")
        chosen[at : at + 1] = [n for n in WORKLOADS if n not in NAMED_ONLY]
    unknown = [n for n in chosen if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    builders: list[tuple[str, Callable[[], Workload]]] = [
        (n, functools.partial(WORKLOADS[n], device, dtype, size)) for n in dict.fromkeys(chosen)
    ]
    if problems:
        builders += [
            (PROBLEM_PREFIX + f.stem, functools.partial(load_problem, f, device, dtype))
            for f in problem_files(problems)
        ]
    return builders
