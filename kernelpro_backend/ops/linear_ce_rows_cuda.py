"""The cross-entropy row kernel in CUDA C++ with the row in shared memory, for 16-bit logits on
Hopper and later: one TMA bulk copy (cp.async.bulk) brings a row into shared memory, the max,
the sum of exp and the gradient are read from there, so each logit is read from memory once
and written once. The Triton kernel (linear_ce_rows.py) reads each row a second time from L2;
on an H100 this kernel runs at copy speed where that one runs at 87% of it (4194 x 32000
bf16: 0.186 ms against 0.212, a plain copy 0.185; BENCHMARKS.md, "The row in shared memory").

The same contract as the Triton kernel: the loss per row (float32, 0 for an ignored target)
and, with `grads`, the row overwritten by `(softmax - onehot) * scale` in the logits' dtype.
Numerics: float32 throughout, the max first and then the sum of exp (exact, not online).

The launch of the last chunk of rows can also finish the loss (linear_ce_rows.Finish): its
last block to end sums every row's loss in a fixed order and writes the loss and the mean's
factor, one launch fewer than a finishing kernel (~45 µs of host a step in eager, more inside
a training step; BENCHMARKS.md, "The LM-head op's host path, cut").

Owns: the CUDA source, `unavailable(logits, target, loss) -> reason | None` (where it cannot
run: the caller then runs the Triton kernel), `run(...)` (its arguments), `counter` (the
per-stream word the finishing launches count their blocks on); compiled once per
process (nvcc, else NVRTC; the cubin cached on disk by runtime/cuda/compile.py), loaded and
launched per device by runtime/cuda/driver.RawKernel.
Must not: choose chunks or compute logits (linear_ce.py does).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from typing import Any

import torch

log = logging.getLogger("kernelpro.ops")

KERNEL = "kp_ce_rows_smem"
THREADS = 256
# Shared memory the kernel declares besides the row (mbarrier, the reduction's 32 floats) and a
# reserve per block, counted against the device's per-SM capacity.
STATIC_SMEM = 1024
# Blocks (rows) that must fit on one SM together. One is enough to beat the Triton kernel: a row
# of 65536 bf16 (128 KiB, one block per SM on an H100) ran in 0.206 ms against Triton's 0.276
# (2048 rows; a copy 0.182; BENCHMARKS.md, "The row in shared memory").
MIN_BLOCKS_PER_SM = 1

SOURCE = r"""
#if KP_FP16
#include <cuda_fp16.h>
typedef __half2 kp_pair;
typedef __half kp_elem;
__device__ __forceinline__ float2 kp_to_f2(kp_pair h) { return __half22float2(h); }
__device__ __forceinline__ kp_pair kp_from_f2(float a, float b) { return __floats2half2_rn(a, b); }
__device__ __forceinline__ float kp_to_f(kp_elem h) { return __half2float(h); }
__device__ __forceinline__ kp_elem kp_from_f(float x) { return __float2half_rn(x); }
#else
#include <cuda_bf16.h>
typedef __nv_bfloat162 kp_pair;
typedef __nv_bfloat16 kp_elem;
__device__ __forceinline__ float2 kp_to_f2(kp_pair h) { return __bfloat1622float2(h); }
__device__ __forceinline__ kp_pair kp_from_f2(float a, float b) {
  return __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ float kp_to_f(kp_elem h) { return __bfloat162float(h); }
__device__ __forceinline__ kp_elem kp_from_f(float x) { return __float2bfloat16_rn(x); }
#endif

#define KP_THREADS %(threads)d
#define KP_LOWEST -3.402823466e38f

__device__ __forceinline__ float kp_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %%0, %%1;" : "=f"(y) : "f"(x));
  return y;
}

// Max (MAX) or sum of one float per thread over the block; every thread gets the result.
template <bool MAX>
__device__ __forceinline__ float kp_block_reduce(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < KP_THREADS / 32 ? red[lane] : (MAX ? KP_LOWEST : 0.0f);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, w) : v + w;
  }
  __syncthreads();  // red[] is written again by the next reduction
  return v;
}

// The row's gradient, (softmax - onehot) * k, over the logits (from the row in shared memory).
__device__ __forceinline__ void kp_gradient(const uint4* v, uint4* out, int nv, float k, float lse,
                                            long long safe) {
  const float L = 1.4426950408889634f;
  const float lseL = lse * L;
  for (int i = threadIdx.x; i < nv; i += KP_THREADS) {
    uint4 q = v[i];
    kp_pair* h = reinterpret_cast<kp_pair*>(&q);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float2 f = kp_to_f2(h[j]);
      float gx = kp_ex2(fmaf(f.x, L, -lseL)) * k, gy = kp_ex2(fmaf(f.y, L, -lseL)) * k;
      const long long c = (long long)i * 8 + 2 * j;
      if (c == safe) gx -= k;
      if (c + 1 == safe) gy -= k;
      h[j] = kp_from_f2(gx, gy);
    }
    __stcs(out + i, q);  // streamed: the gradient is not read again before the next GEMM
  }
}

// One block per row; the row (n_cols * 2 bytes, a multiple of 16, starting on 16 bytes) in
// dynamic shared memory.
extern "C" __global__ void __launch_bounds__(KP_THREADS) kp_ce_rows_smem(
    kp_elem* __restrict__ logits, long long stride, const long long* __restrict__ target,
    float* loss, float scale, int n_cols, long long ignore_index, int grads, unsigned* counter,
    const float* all_loss, const long long* all_target, int total_rows, void* out_loss,
    int loss_fp32, float* factor, int mean) {
  extern __shared__ __align__(128) unsigned char kp_row[];
  __shared__ __align__(8) unsigned long long bar;
  __shared__ float red[32];
  const long long row = blockIdx.x;
  kp_elem* base = logits + row * stride;
  const unsigned bytes = (unsigned)n_cols * 2u;
  const unsigned bar_a = (unsigned)__cvta_generic_to_shared(&bar);
  const unsigned row_a = (unsigned)__cvta_generic_to_shared(kp_row);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%%0], 1;" ::"r"(bar_a));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], %%1;"
                 ::"r"(bar_a), "r"(bytes) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%0], [%%1], %%2, [%%3];"
        ::"r"(row_a), "l"(base), "r"(bytes), "r"(bar_a) : "memory");
  }
  const long long t = target[row];
  const bool valid = t != ignore_index;
  if (valid && (t < 0 || t >= n_cols)) {  // as PyTorch's device-side assert
    if (threadIdx.x == 0)
      printf("kernelpro cross-entropy: target %%lld out of range [0, %%d)\n", t, n_cols);
    __trap();
  }
  __syncthreads();  // the barrier is initialised before anyone waits on it
  asm volatile(
      "{\n .reg .pred P1;\n KP_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 P1, [%%0], 0;\n"
      " @P1 bra KP_DONE;\n bra KP_WAIT;\n KP_DONE:\n }" ::"r"(bar_a) : "memory");
  const uint4* v = reinterpret_cast<const uint4*>(kp_row);
  const int nv = n_cols >> 3;
  const float L = 1.4426950408889634f;  // log2(e): exp(x) = 2^(x * L)
  float m = KP_LOWEST;
  for (int i = threadIdx.x; i < nv; i += KP_THREADS) {
    uint4 q = v[i];
    const kp_pair* h = reinterpret_cast<const kp_pair*>(&q);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float2 f = kp_to_f2(h[j]);
      m = fmaxf(m, fmaxf(f.x, f.y));
    }
  }
  m = kp_block_reduce<true>(m, red);
  const float mL = m * L;
  float s = 0.0f;
  for (int i = threadIdx.x; i < nv; i += KP_THREADS) {
    uint4 q = v[i];
    const kp_pair* h = reinterpret_cast<const kp_pair*>(&q);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float2 f = kp_to_f2(h[j]);
      s += kp_ex2(fmaf(f.x, L, -mL)) + kp_ex2(fmaf(f.y, L, -mL));
    }
  }
  s = kp_block_reduce<false>(s, red);
  const float lse = m + __logf(s);
  const long long safe = valid ? t : 0;
  if (threadIdx.x == 0) {
    const float picked = kp_to_f(reinterpret_cast<const kp_elem*>(kp_row)[safe]);
    loss[row] = valid ? lse - picked : 0.0f;
  }
  if (grads) kp_gradient(v, reinterpret_cast<uint4*>(base), nv, valid ? scale : 0.0f, lse, safe);
  if (counter == nullptr) return;
  // The finish, when asked (the last chunk of rows): the block that ends last sums every row's
  // loss in a fixed order (deterministic), counts the targets not ignored, writes the loss
  // and the mean's factor, and sets the counter back to 0 for the next launch on its stream.
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's loss[row] is visible before the counter says so
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  float total = 0.0f, counted = 0.0f;
  for (int r = threadIdx.x; r < total_rows; r += KP_THREADS) {
    total += __ldcg(all_loss + r);
    counted += all_target[r] != ignore_index ? 1.0f : 0.0f;
  }
  total = kp_block_reduce<false>(total, red);
  counted = kp_block_reduce<false>(counted, red);
  if (threadIdx.x == 0) {
    // PyTorch's mean: over the targets not ignored (0 / 0 = nan); a sum: the factor is 1
    const float value = mean ? __fdiv_rn(total, counted) : total;
    if (loss_fp32)
      *reinterpret_cast<float*>(out_loss) = value;
    else
      *reinterpret_cast<kp_elem*>(out_loss) = kp_from_f(value);
    *factor = mean ? __fdiv_rn((float)total_rows, fmaxf(counted, 1.0f)) : 1.0f;
    *counter = 0u;
  }
}
"""


def source(fp16: bool) -> str:
    return f"#define KP_FP16 {int(fp16)}\n" + SOURCE % {"threads": THREADS}


def unavailable(
    logits: torch.Tensor, target: torch.Tensor, loss: torch.Tensor | None = None
) -> str | None:
    """None when the kernel can run on `logits` [rows, cols], `target` [rows] and the per-row
    `loss` it writes; else why not (the caller runs the Triton kernel instead)."""
    if not logits.is_cuda:
        return "the logits are not on a CUDA device"
    if logits.dtype not in (torch.bfloat16, torch.float16):
        return f"{logits.dtype} logits (the kernel takes bf16 and fp16)"
    if target.dtype != torch.int64 or not target.is_contiguous():
        return "targets not contiguous int64"
    if loss is not None and (loss.dtype != torch.float32 or not loss.is_contiguous()):
        return "per-row losses not contiguous float32"
    device = logits.device.index or 0
    major, minor = _capability(device)
    if major < 9:
        return f"sm_{major}{minor} has no TMA bulk copy (sm_90 and later)"
    size = logits.element_size()
    if logits.stride(1) != 1 or (logits.stride(0) * size) % 16 or logits.data_ptr() % 16:
        return "rows do not start on 16 bytes"
    row_bytes = logits.shape[1] * size
    if row_bytes % 16:
        return f"a row of {row_bytes} bytes is not a multiple of 16"
    room = _room(device)
    if row_bytes > room:
        return f"a row of {row_bytes} bytes does not fit in shared memory ({room} a block)"
    return _broken.get("reason")


@functools.cache
def _capability(device: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)  # cached: this check runs every chunk


@functools.cache
def _room(device: int) -> int:
    """Bytes of a row that fit in shared memory `MIN_BLOCKS_PER_SM` times on one SM."""
    per_sm = torch.cuda.get_device_properties(device).shared_memory_per_multiprocessor
    from ..runtime.cuda.driver import smem_optin_limit

    return min(per_sm // MIN_BLOCKS_PER_SM, smem_optin_limit(device)) - STATIC_SMEM


_broken: dict[str, str] = {}  # set once if the kernel cannot be compiled or loaded here
_lock = threading.Lock()


@functools.cache
def _kernel(device: int, fp16: bool) -> Any:
    """The kernel loaded on `device`, compiled on first use."""
    from ..runtime.cuda.compile import arch_for_capability, compile_cuda
    from ..runtime.cuda.driver import RawKernel

    arch = arch_for_capability(*torch.cuda.get_device_capability(device))
    log.info("compiling the CUDA cross-entropy row kernel for %s (once; the cubin is cached)", arch)
    cubin = compile_cuda(source(fp16), arch, kernels=[KERNEL])
    return RawKernel(cubin.data, KERNEL, device, max_smem=_room(device))


def load(logits: torch.Tensor) -> Any | None:
    """The kernel (a runtime.cuda.driver.RawKernel) for `logits`' device and dtype, or None
    (logged once) when it cannot be compiled or loaded here: the caller falls back to the
    Triton kernel."""
    if _broken:
        return None
    try:
        with _lock:
            return _kernel(logits.device.index or 0, logits.dtype == torch.float16)
    except Exception as e:
        _broken["reason"] = f"the CUDA row kernel could not be built or loaded: {e}"
        log.warning("%s; the Triton row kernel runs instead", _broken["reason"])
        return None


def counter(device: int, stream: int) -> int | None:
    """The address of the zeroed 32-bit word the finishing launches on (`device`, `stream`)
    count their blocks on (each such launch sets it back to 0 as it ends: launches on one stream
    run in turn), made on first use with the driver's own allocator: a word from torch's caching
    allocator made while CUDA-graph trees warm a graph up would come from that graph's private
    pool, which it hands to other tensors later. None while the current stream is being captured
    and has no word yet (no allocation is allowed during a capture): the caller then finishes
    with its own kernel. Graph replays use the word of the stream they were captured on; replays
    of graphs captured on one stream must not run at once on two streams."""
    found = _COUNTERS.get((device, stream))
    if found is None and not torch.cuda.is_current_stream_capturing():
        from ..runtime.cuda.driver import zeroed_word

        found = _COUNTERS[(device, stream)] = zeroed_word(device, stream)
    return found


_COUNTERS: dict[tuple[int, int], int] = {}  # never freed: one word per stream that finished
# The finish's parameters: counter, every row's loss, every target, their count, the loss, its
# dtype (float32 or not), the factor, mean or sum.
_P, _I = ctypes.c_void_p, ctypes.c_int
_FINISH_ARGS = (_P, _P, _P, _I, _P, _I, _P, _I)


def run(
    logits: torch.Tensor,
    target: torch.Tensor,
    loss: torch.Tensor,
    scale: float,
    ignore_index: int,
    grads: bool,
    then: Any = None,
) -> bool:
    """Launch on torch's current stream; False (nothing launched) if the kernel is not
    available here. `target` int64, `loss` float32 [rows], both contiguous. `then` (a
    linear_ce_rows.Finish, for the last chunk of rows) asks the launch to finish the loss too;
    its `done` says whether it did."""
    kernel = load(logits)
    if kernel is None:
        return False
    rows, cols = logits.shape
    device = kernel.device
    stream = torch.cuda.current_stream(device).cuda_stream
    count = None if then is None or rows == 0 else counter(device, stream)
    if count is not None and then.loss.dtype not in (torch.float32, logits.dtype):
        count = None  # the kernel writes a float32 or the logits' own 16-bit loss
    finish = (
        (
            count, then.losses.data_ptr(), then.target.data_ptr(), then.losses.shape[0],
            then.loss.data_ptr(), int(then.loss.dtype == torch.float32), then.factor.data_ptr(),
            int(then.mean),
        )
        if count is not None
        else (0,) * len(_FINISH_ARGS)  # a null counter: no finish
    )  # fmt: skip
    values = [
        ctypes.c_void_p(logits.data_ptr()), ctypes.c_longlong(logits.stride(0)),
        ctypes.c_void_p(target.data_ptr()), ctypes.c_void_p(loss.data_ptr()),
        ctypes.c_float(scale), ctypes.c_int(cols), ctypes.c_longlong(ignore_index),
        ctypes.c_int(int(grads)), *(kind(v) for kind, v in zip(_FINISH_ARGS, finish, strict=True)),
    ]  # fmt: skip
    kernel.launch(
        rows, THREADS, cols * logits.element_size(), values, f" ({rows} x {cols})", stream
    )
    if count is not None:
        then.done = True
    return True
