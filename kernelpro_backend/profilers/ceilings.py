"""The device's measured ceilings: DRAM bandwidth and FP32 / TF32 / BF16 throughput.

Owns: `Ceilings`, measuring them once per device and caching them as JSON in the cache
directory (`CacheLayout.ceilings`, paths.py: ceilings-<device-name>.json), and `peak_flops_per_s` (which roof
applies to a dtype under a precision policy).
Must not: time candidates (runtime/ does) or classify kernels (speed_of_light.py does).

Ceilings are measured, not copied from a datasheet: a kernel faster than what the device was
seen to do is a measurement bug or a cheat. H100 SXM datasheet: 3.35 TB/s HBM3, 67 TFLOP/s
FP32, 495 TFLOP/s TF32 dense, 989 TFLOP/s BF16 dense; GPU.md saw ~3.0 TB/s and ~800 TFLOP/s.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import torch

from ..paths import CacheLayout, atomic_write

DATASHEET_H100_SXM = {
    "dram_bytes_per_s": 3.35e12,
    "fp32_flops_per_s": 67e12,
    "tf32_flops_per_s": 495e12,
    "bf16_flops_per_s": 989e12,
}
CEILINGS_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Ceilings:
    device_name: str
    dram_bytes_per_s: float
    fp32_flops_per_s: float
    tf32_flops_per_s: float
    bf16_flops_per_s: float
    l2_bytes: int
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def peak_flops_per_s(self, dtype: str, precision: str, tensor_op: bool) -> float:
        """The compute roof for matmul-like (`tensor_op`) or other work in `dtype`."""
        if not tensor_op:
            return self.fp32_flops_per_s
        if dtype in ("bfloat16", "float16") or dtype.startswith(("int", "uint", "float8")):
            return self.bf16_flops_per_s
        if dtype == "float32" and precision == "tf32":
            return self.tf32_flops_per_s
        if dtype == "float32" and precision == "tf32x3":
            return self.tf32_flops_per_s / 3
        return self.fp32_flops_per_s  # float32 IEEE; float64 runs at about the FP32 rate on H100

    def to_dict(self) -> dict[str, Any]:
        return {"schema": CEILINGS_SCHEMA, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ceilings:
        if d.get("schema") != CEILINGS_SCHEMA:
            raise ValueError(f"ceilings schema {d.get('schema')} is not {CEILINGS_SCHEMA}")
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})

    @classmethod
    def cache_path(cls, device_name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
        return CacheLayout.of(cache_dir).ceilings(device_name)

    @classmethod
    def load_or_measure(
        cls,
        device: torch.device | str | int = "cuda",
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> Ceilings:
        """The cached ceilings of this device, measuring (a few seconds) on the first call."""
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"ceilings are measured on CUDA devices only, got {device}")
        name = torch.cuda.get_device_name(device)
        path = cls.cache_path(name, cache_dir)
        if path.exists():
            try:
                return cls.from_dict(json.loads(path.read_text()))
            except (ValueError, TypeError, KeyError) as e:
                print(f"kernelpro: ignoring unreadable ceilings file {path} ({e}); re-measuring")
        ceilings = measure(device)
        atomic_write(path, json.dumps(ceilings.to_dict(), indent=1, sort_keys=True))
        return ceilings


def _best_ms(fn: Any, reps: int = 10) -> float:
    """Fastest of `reps` event-timed calls after a warm-up: the ceiling is the best seen."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def _fma_flops_per_s(device: torch.device) -> float | None:
    """FP32 FMA throughput from a register-only Triton loop (2 flops per FMA)."""
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def fma_loop(out_ptr, iters, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            a = offs.to(tl.float32) * 1e-7
            b = a + 0.5
            c = a + 0.25
            d = a + 0.125
            for _ in range(iters):  # four independent chains hide the FMA latency
                a = a * 0.999 + 0.001
                b = b * 0.999 + 0.001
                c = c * 0.999 + 0.001
                d = d * 0.999 + 0.001
            tl.store(out_ptr + offs, a + b + c + d)

        sms = torch.cuda.get_device_properties(device).multi_processor_count
        block, programs, iters = 1024, sms * 16, 4096
        out = torch.empty(block * programs, device=device)
        ms = _best_ms(lambda: fma_loop[(programs,)](out, iters, BLOCK=block, num_warps=8))
        return 2 * 4 * iters * block * programs / (ms * 1e-3)
    except Exception as e:  # an unusual triton build: the GEMM figure stands alone
        print(f"kernelpro: FP32 FMA loop failed ({type(e).__name__}: {e}); using SGEMM only")
        return None


def _matmul_flops_per_s(device: torch.device, dtype: torch.dtype, tf32: bool, n: int) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        ms = _best_ms(lambda: torch.mm(a, b))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n**3 / (ms * 1e-3)


def _bandwidths(device: torch.device) -> tuple[float, float]:
    """(copy bytes/s counting read + write, read-only bytes/s) on 1 GiB, far beyond L2."""
    src = torch.randn(256 * 2**20, device=device)
    dst = torch.empty_like(src)
    copy_ms = _best_ms(lambda: dst.copy_(src))
    sum_ms = _best_ms(lambda: src.sum())
    return 2 * src.nbytes / (copy_ms * 1e-3), src.nbytes / (sum_ms * 1e-3)


def measure(device: torch.device) -> Ceilings:
    """Measure the ceilings now (about 2-5 s on an H100)."""
    props = torch.cuda.get_device_properties(device)
    with torch.cuda.device(device):
        copy_bw, read_bw = _bandwidths(device)
        sgemm = _matmul_flops_per_s(device, torch.float32, tf32=False, n=8192)
        fma = _fma_flops_per_s(device)
        tf32 = _matmul_flops_per_s(device, torch.float32, tf32=True, n=8192)
        bf16 = _matmul_flops_per_s(device, torch.bfloat16, tf32=False, n=8192)
    return Ceilings(
        device_name=props.name,
        dram_bytes_per_s=max(copy_bw, read_bw),
        fp32_flops_per_s=max(sgemm, fma or 0.0),
        tf32_flops_per_s=tf32,
        bf16_flops_per_s=bf16,
        l2_bytes=int(getattr(props, "L2_cache_size", 50 * 2**20)),
        details={
            "copy_bytes_per_s": copy_bw,
            "read_bytes_per_s": read_bw,
            "sgemm_flops_per_s": sgemm,
            "fma_loop_flops_per_s": fma,
            "torch": torch.__version__,
        },
    )
