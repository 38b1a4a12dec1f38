"""CUDA C++ candidates written to the contract of kernelpro_backend/runtime/cuda/source.py:
correct ones (vector add, row softmax), broken ones (does not compile, wrong launch header) and
hostile ones (out-of-bounds write, endless loop). Shared by the CPU and GPU tests
(test_cuda_candidates.py, test_cuda_candidates_gpu.py)."""

VECTOR_ADD = """
/* kernelpro-launch
{
  "outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}],
  "grid": ["cdiv(in0.numel(), 256)"],
  "block": [256],
  "args": ["in0", "in1", "out0", {"i64": "in0.numel()"}]
}
*/
extern "C" __global__ void vector_add(const float* __restrict__ x, const float* __restrict__ y,
                                      float* __restrict__ out, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}
"""

# One block per row; the row is read three times (max, sum, write), all from L2 for these sizes.
ROW_SOFTMAX = """
/* kernelpro-launch
{
  "outputs": [{"shape": "in0.shape", "dtype": "float32"}],
  "grid": ["in0.shape[0]"],
  "block": [256],
  "smem": "256 * 4",
  "args": ["in0", "out0", {"i32": "in0.shape[1]"}, {"i64": "in0.stride(0)"},
           {"i64": "out0.stride(0)"}]
}
*/
__device__ float block_reduce(float v, float* scratch, bool is_max) {
  int t = threadIdx.x;
  scratch[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) scratch[t] = is_max ? fmaxf(scratch[t], scratch[t + s]) : scratch[t] + scratch[t + s];
    __syncthreads();
  }
  float r = scratch[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void row_softmax(const float* x, float* y, int cols, long long ldx,
                                       long long ldy) {
  extern __shared__ float scratch[];
  const float* row = x + blockIdx.x * ldx;
  float* out = y + blockIdx.x * ldy;
  float m = __int_as_float(0xff800000);  // -inf; NVRTC has no <math.h> for INFINITY
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_reduce(m, scratch, true);
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
  s = block_reduce(s, scratch, false);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) / s;
}
"""

DOES_NOT_COMPILE = VECTOR_ADD.replace("x[i] + y[i]", "x[i] + undefined_name[i]")

NOT_EXTERN_C = VECTOR_ADD.replace('extern "C" __global__', "__global__")

# Declares an int where the header passes an i64: the cubin's parameter layout says so.
WRONG_ARG_TYPE = VECTOR_ADD.replace("float* __restrict__ out, long long n", "float* out, int n")

OUT_OF_BOUNDS_WRITE = """
/* kernelpro-launch
{
  "outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}],
  "grid": [1], "block": [128],
  "args": ["out0"]
}
*/
extern "C" __global__ void oob(float* out) {
  out[threadIdx.x + (1ll << 40)] = 0.f;
}
"""

ENDLESS_LOOP = """
/* kernelpro-launch
{
  "outputs": [{"shape": "in0.shape", "dtype": "in0.dtype", "init": "zeros"}],
  "grid": [1], "block": [32],
  "args": ["out0"]
}
*/
extern "C" __global__ void spin(float* out) {
  // A volatile read is a side effect, so the compiler must keep the loop; out is all zeros.
  volatile float* flag = out;
  while (*flag == 0.f) {
  }
}
"""

# 100 KiB of dynamic shared memory per block: launches only after the >48 KiB opt-in.
BIG_SMEM_ADD = """
/* kernelpro-launch
{
  "outputs": [{"shape": "in0.shape", "dtype": "in0.dtype"}],
  "grid": ["cdiv(in0.numel(), 256)"],
  "block": [256],
  "smem": "100 * 1024",
  "args": ["in0", "in1", "out0", {"i64": "in0.numel()"}]
}
*/
extern "C" __global__ void big_smem_add(const float* x, const float* y, float* out, long long n) {
  extern __shared__ float staged[];  // 25600 floats; the top 256 are used
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  float* slot = staged + (100 * 1024 / 4 - 256) + threadIdx.x;
  if (i < n) *slot = x[i] + y[i];
  __syncthreads();
  if (i < n) out[i] = *slot;
}
"""

# CuTe: each block copies a 128-element tile of x into out, doubled (needs the CUTLASS headers).
CUTE_SCALE = """
/* kernelpro-launch
{
  "outputs": [{"shape": "in0.shape", "dtype": "float32"}],
  "grid": ["cdiv(in0.numel(), 128)"],
  "block": [128],
  "args": ["in0", "out0", {"i32": "in0.numel()"}]
}
*/
#include <cute/tensor.hpp>

extern "C" __global__ void cute_scale(const float* x, float* out, int n) {
  using namespace cute;
  Tensor gx = make_tensor(make_gmem_ptr(x), make_shape(n));
  Tensor go = make_tensor(make_gmem_ptr(out), make_shape(n));
  Tensor tx = local_tile(gx, make_shape(Int<128>{}), make_coord(blockIdx.x));
  Tensor to = local_tile(go, make_shape(Int<128>{}), make_coord(blockIdx.x));
  int i = blockIdx.x * 128 + threadIdx.x;
  if (i < n) to(threadIdx.x) = 2.f * tx(threadIdx.x);
}
"""
