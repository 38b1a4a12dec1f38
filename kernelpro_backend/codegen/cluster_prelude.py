"""The device helpers every row-resident CUDA kernel starts with (templates/cluster.py).

Owns: the C++ text: NaN-propagating max/min, the reduction functors, 16-byte vector loads and
stores with bf16/fp16 conversion, the warp -> block reduction (every thread gets the block's
value, folded in warp order) and the cluster reduction through distributed shared memory
(every CTA of the cluster folds the CTAs' values in rank order, so all get the same bits), and
the same for a softmax's (max, sum of exp) pair merged in one exchange.
Must not: depend on a spec.
"""

PRELUDE = r"""#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

__device__ __forceinline__ float kp_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float kp_min(float a, float b) { return (a != a || a < b) ? a : b; }
struct KpSum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct KpMax { __device__ __forceinline__ float operator()(float a, float b) const { return kp_max(a, b); } };
struct KpMin { __device__ __forceinline__ float operator()(float a, float b) const { return kp_min(a, b); } };
// A row gather: integer sum of float32 bit patterns, exactly one of them not zero.
struct KpBits {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return __int_as_float(__float_as_int(a) + __float_as_int(b));
  }
};

// exp and division at the precision of the Triton templates (Triton lowers float32 exp to
// ex2.approx of x * log2(e) and division to div.full, both within 2 ulp), not CUDA's slower
// correctly rounded expf and '/': a softmax computes one of each per element.
__device__ __forceinline__ float kp_exp(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ float kp_div(float a, float b) {
  float y;
  asm("div.full.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

__device__ __forceinline__ float kp_f(float v) { return v; }
__device__ __forceinline__ float kp_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float kp_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T kp_cvt(float v);
template <> __device__ __forceinline__ float kp_cvt<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 kp_cvt<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half kp_cvt<__half>(float v) { return __float2half_rn(v); }

template <typename T, int V> struct alignas(sizeof(T) * V) KpVec { T v[V]; };

template <typename T, int V>
__device__ __forceinline__ void kp_load(const T* __restrict__ p, float* out) {
  const KpVec<T, V> r = *reinterpret_cast<const KpVec<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = kp_f(r.v[j]);
}

template <typename T, int V>
__device__ __forceinline__ void kp_store(T* __restrict__ p, const float* in) {
  KpVec<T, V> r;
#pragma unroll
  for (int j = 0; j < V; ++j) r.v[j] = kp_cvt<T>(in[j]);
  *reinterpret_cast<KpVec<T, V>*>(p) = r;
}

// HOLD=shared: a thread's vectors of the row go to shared memory without passing through
// registers (cp.async: 16 bytes bypass L1, 4 or 8 go through it, 2 are copied).
template <int N>
__device__ __forceinline__ void kp_cp_async(void* smem, const void* gmem) {
  if constexpr (N >= 4) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    if constexpr (N == 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(gmem), "n"(N) : "memory");
  } else {
    *reinterpret_cast<unsigned short*>(smem) = *reinterpret_cast<const unsigned short*>(gmem);
  }
}
// Each thread reads back only the vectors it copied, so its own wait is enough.
__device__ __forceinline__ void kp_cp_async_wait() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

// Every warp folds the warps' partials with the same butterfly, so every thread of the block
// gets the same bits without a second barrier (NW is a power of two).
template <int NW, typename F>
__device__ __forceinline__ float kp_block(float v, float* part, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (NW == 1) {
    return v;
  } else {
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = part[threadIdx.x & (NW - 1)];
#pragma unroll
    for (int o = NW / 2; o > 0; o >>= 1) r = f(r, __shfl_xor_sync(0xffffffffu, r, o));
    return r;
  }
}

template <int C, typename F>
__device__ __forceinline__ float kp_cluster(float v, float* slot, F f) {
  if constexpr (C == 1) {
    return v;
  } else {
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) *slot = v;
    cl.sync();
    float r = *cl.map_shared_rank(slot, 0);
#pragma unroll
    for (int k = 1; k < C; ++k) r = f(r, *cl.map_shared_rank(slot, k));
    return r;
  }
}

// A softmax's row statistics in one exchange: (max, sum of exp(y - max)) pairs merge by
// rescaling to the larger max. The products are rounded before the add (no FMA contraction),
// so the merge is symmetric and every thread of a butterfly gets the same bits.
struct KpPair { float m, s; };
__device__ __forceinline__ KpPair kp_pair(KpPair a, KpPair b) {
  const float m = kp_max(a.m, b.m);
  const float base = (m == __int_as_float(0xff800000)) ? 0.0f : m;  // all -inf: nothing to scale
  return KpPair{m, __fadd_rn(__fmul_rn(a.s, expf(a.m - base)), __fmul_rn(b.s, expf(b.m - base)))};
}

template <int NW>
__device__ __forceinline__ KpPair kp_block_pair(KpPair v, float* part_m, float* part_s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = kp_pair(v, KpPair{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  if constexpr (NW == 1) {
    return v;
  } else {
    if ((threadIdx.x & 31) == 0) { part_m[threadIdx.x >> 5] = v.m; part_s[threadIdx.x >> 5] = v.s; }
    __syncthreads();
    KpPair r{part_m[threadIdx.x & (NW - 1)], part_s[threadIdx.x & (NW - 1)]};
#pragma unroll
    for (int o = NW / 2; o > 0; o >>= 1)
      r = kp_pair(r, KpPair{__shfl_xor_sync(0xffffffffu, r.m, o), __shfl_xor_sync(0xffffffffu, r.s, o)});
    return r;
  }
}

template <int C>
__device__ __forceinline__ KpPair kp_cluster_pair(KpPair v, float* slot_m, float* slot_s) {
  if constexpr (C == 1) {
    return v;
  } else {
    cg::cluster_group cl = cg::this_cluster();
    if (threadIdx.x == 0) { *slot_m = v.m; *slot_s = v.s; }
    cl.sync();
    KpPair r{*cl.map_shared_rank(slot_m, 0), *cl.map_shared_rank(slot_s, 0)};
#pragma unroll
    for (int k = 1; k < C; ++k)
      r = kp_pair(r, KpPair{*cl.map_shared_rank(slot_m, k), *cl.map_shared_rank(slot_s, k)});
    return r;
  }
}

// After its last read of other CTAs' slots a CTA arrives; it waits before it exits, so no CTA
// leaves while another may still read its shared memory, and the stores run in between.
__device__ __forceinline__ void kp_cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void kp_cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
"""
