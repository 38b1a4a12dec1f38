"""A CUTLASS 3 / CuTe GEMM for Hopper as CUDA C++ with a host entry point: D = act(A @ B^T
(+ bias per column) (+ C)), 16-bit operands, fp32 accumulation, TMA loads and a
warp-specialised main loop (ping-pong: one consumer warp group's epilogue runs while the other
computes its next tile, the overlap a Triton tile cannot get), the epilogue fused by CUTLASS's
epilogue visitor (bias, activation, source term). The activation is one of CUTLASS's functors,
or "custom": C++ statements (`activation_body`, from cutlass_match.c_body) wrapped in a functor
`KpAct` that CUTLASS applies element by element like its own. The "stream_k" schedule runs
the cooperative kernel under CUTLASS's stream-K tile scheduler (deterministic reduction).

Owns: `CutlassGemm` (the kernel's configuration: dtype, layouts, epilogue, tile, cluster,
schedule, checked on construction) and its source. The source exports two C functions a host
loads from a shared library (runtime/cuda/host.py): `kp_gemm_workspace(m, n, k, sm_count)` and
`kp_gemm_run(a, b, bias, c, d, m, n, k, lda, ldb, ldc, ldd, workspace, sm_count, stream)`,
0 when it ran, 1 when the problem does not fit the kernel (alignment, sizes), 2/3 when
CUTLASS failed to initialise or launch, and `kp_gemm_layout()` (which operand dims are
contiguous). Operands: A [M, K] with K contiguous (row-major, `a_major="k"`) or M (a
transposed activation of a backward dW = dy^T @ x), lda the other dim's stride; B [N, K] with
K contiguous (a Linear's weight as stored) or N (the weight in a backward dx = dy @ W), ldb
likewise; C and D [M, N] row-major (ldc, ldd); bias [N].
Must not: compile, load or launch (runtime/cuda/host.py), or know aten (lowering decides when
a subgraph is this GEMM).
"""

from __future__ import annotations

import dataclasses

DTYPES = {"bfloat16": "cutlass::bfloat16_t", "float16": "cutlass::half_t"}
ACTIVATIONS = {
    "identity": "cutlass::epilogue::thread::Identity",
    "relu": "cutlass::epilogue::thread::ReLu",
    "gelu": "cutlass::epilogue::thread::GELU",  # erf, as torch's default GELU
    "gelu_tanh": "cutlass::epilogue::thread::GELU_taylor",  # F.gelu(approximate="tanh")
    "silu": "cutlass::epilogue::thread::SiLu",
    "sigmoid": "cutlass::epilogue::thread::Sigmoid",
    "custom": "KpAct",  # the spec's own elementwise ops (activation_body), as a functor
}
SCHEDULES = {
    # (main loop, epilogue): ping-pong (two consumer warp groups on alternate tiles) or
    # cooperative (both on one tile; tile M of 128 or more)
    "pingpong": (
        "cutlass::gemm::KernelTmaWarpSpecializedPingpong",
        "cutlass::epilogue::TmaWarpSpecialized",
    ),
    "cooperative": (
        "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
        "cutlass::epilogue::TmaWarpSpecializedCooperative",
    ),
    # cooperative warp groups under the stream-K tile scheduler: the tiles of a last, partial
    # wave are split along K over the SMs that would idle, their partial sums reduced in K order
    # (CUTLASS's deterministic turnstile, so a run gives the same bits as the last)
    "stream_k": (
        "cutlass::gemm::KernelTmaWarpSpecializedCooperative",
        "cutlass::epilogue::TmaWarpSpecializedCooperative",
    ),
}
# The kernel's tile scheduler, after its collectives (none: CUTLASS's persistent default)
TILE_SCHEDULERS = {"stream_k": ", cutlass::gemm::StreamKScheduler"}
ENTRY_POINTS = ("kp_gemm_workspace", "kp_gemm_run")
# The templates rendered as a Python module around a CUTLASS library (built by nvcc before a
# search can measure it): this GEMM and the conv (cutlass_conv.py)
CUTLASS_TEMPLATES = ("gemm_cutlass", "conv_cutlass")


class CutlassConfigError(ValueError):
    """The configuration cannot be built (an unsupported dtype, activation or tile)."""


@dataclasses.dataclass(frozen=True)
class CutlassGemm:
    dtype: str = "bfloat16"  # A, B, C, D and bias
    activation: str = "identity"
    bias: bool = False  # a per-column (per output feature) bias
    source: bool = False  # + C (beta = 1): a residual
    tile: tuple[int, int, int] = (128, 128, 64)
    cluster: tuple[int, int] = (1, 1)
    schedule: str = "pingpong"
    # With activation "custom": C++ statements computing `float y` from `float x` (acc + bias)
    activation_body: str = dataclasses.field(default="", repr=False)
    # Which dim of each operand is contiguous: A [M, K] "k" (row-major) or "m"; B [N, K] "k"
    # (a Linear's weight as stored) or "n" (the weight of a backward dx = dy @ W)
    a_major: str = "k"
    b_major: str = "k"

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise CutlassConfigError(f"dtype {self.dtype!r}: one of {sorted(DTYPES)}")
        if self.activation not in ACTIVATIONS:
            raise CutlassConfigError(
                f"activation {self.activation!r}: one of {sorted(ACTIVATIONS)}"
            )
        if self.schedule not in SCHEDULES:
            raise CutlassConfigError(f"schedule {self.schedule!r}: one of {sorted(SCHEDULES)}")
        if (self.activation == "custom") != bool(self.activation_body):
            raise CutlassConfigError("activation_body goes with activation 'custom', and only")
        m, n, k = self.tile
        if m not in (64, 128, 256) or n not in (64, 128, 256) or k not in (32, 64, 128):
            raise CutlassConfigError(
                f"tile {self.tile}: M and N in 64/128/256, K in 32/64/128 (wgmma shapes)"
            )
        if self.schedule in ("cooperative", "stream_k") and m < 128:
            raise CutlassConfigError(
                f"the {self.schedule} schedule splits tile M={m} over two warp groups: use "
                "M >= 128 or the pingpong schedule"
            )
        if self.a_major not in ("k", "m") or self.b_major not in ("k", "n"):
            raise CutlassConfigError(
                f"majors A={self.a_major!r} B={self.b_major!r}: A 'k' or 'm', B 'k' or 'n'"
            )
        if any(c not in (1, 2) for c in self.cluster):
            raise CutlassConfigError(f"cluster {self.cluster}: 1 or 2 CTAs along M and N")

    def source_text(self) -> str:
        """The CUDA C++ translation unit (compile with -arch=sm_90a, CUTLASS headers)."""
        element = DTYPES[self.dtype]
        element_c = element if self.source else "void"
        act = ACTIVATIONS[self.activation]
        if self.bias:
            fusion = (
                "cutlass::epilogue::fusion::LinCombPerColBiasEltAct<\n"
                f"    {act}, ElementD, ElementCompute, ElementD, ElementD>"
            )
            bias_arg = "  args.epilogue.thread.bias_ptr = static_cast<const ElementD*>(bias);"
        else:
            fusion = (
                "cutlass::epilogue::fusion::LinCombEltAct<\n"
                f"    {act}, ElementD, ElementCompute, ElementD>"
            )
            bias_arg = "  (void)bias;"
        mainloop, epilogue = SCHEDULES[self.schedule]
        tm, tn, tk = self.tile
        cm, cn = self.cluster
        return _SOURCE.format(
            config=self,
            element=element,
            element_c=element_c,
            fusion=fusion,
            bias_arg=bias_arg,
            beta="1.0f" if self.source else "0.0f",
            tile=f"Shape<_{tm}, _{tn}, _{tk}>",
            cluster=f"Shape<_{cm}, _{cn}, _1>",
            mainloop=mainloop,
            epilogue=epilogue,
            scheduler=TILE_SCHEDULERS.get(self.schedule, ""),
            functor=_FUNCTOR.format(body=self.activation_body) if self.activation_body else "",
            layout_a="RowMajor;     // A [M, K], K"
            if self.a_major == "k"
            else "ColumnMajor;  // A [M, K], M",
            layout_b="ColumnMajor;  // B [N, K], K"
            if self.b_major == "k"
            else "RowMajor;     // B [N, K], N",
            stride_a="lda, Int<1>{}" if self.a_major == "k" else "Int<1>{}, lda",
            stride_b="ldb, Int<1>{}" if self.b_major == "k" else "Int<1>{}, ldb",
            layout_code=(self.a_major == "m") + 2 * (self.b_major == "n"),
        )


_FUNCTOR = """
// The subgraph's own elementwise epilogue on x = acc (+ bias), in float32, as one functor.
CUTLASS_HOST_DEVICE float kp_max(float a, float b) {{ return a != a ? a : (b != b ? b : fmaxf(a, b)); }}
CUTLASS_HOST_DEVICE float kp_min(float a, float b) {{ return a != a ? a : (b != b ? b : fminf(a, b)); }}

template <typename T>
struct KpAct {{
  static const bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE T operator()(T const& value) const {{
#if defined(__CUDA_ARCH__)
    float x = float(value);
    {body}
    return T(y);
#else
    return value;
#endif
  }}
}};

template <typename T, int N>
struct KpAct<cutlass::Array<T, N>> {{
  static const bool kIsHeavy = true;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& v) const {{
    cutlass::Array<T, N> out;
    KpAct<T> f;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = f(v[i]);
    return out;
  }}
}};
"""


_SOURCE = """\
// Generated by kernelpro (codegen/templates/cutlass.py) from {config}
// D[M,N] = act(A[M,K] @ B[N,K]^T (+ bias[N]) (+ C[M,N])), fp32 accumulation.
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

using namespace cute;

using ElementA = {element};
using ElementB = {element};
using ElementC = {element_c};
using ElementD = {element};
using ElementAccumulator = float;
using ElementCompute = float;
using LayoutA = cutlass::layout::{layout_a} contiguous
using LayoutB = cutlass::layout::{layout_b} contiguous
using LayoutC = cutlass::layout::RowMajor;
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlign = 128 / cutlass::sizeof_bits<ElementD>::value;  // 16-byte accesses
using TileShape = {tile};
using ClusterShape = {cluster};
{functor}
using Fusion = {fusion};

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute,
    ElementC, LayoutC, kAlign, ElementD, LayoutD, kAlign,
    {epilogue}, Fusion>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlign, ElementB,
    LayoutB, kAlign, ElementAccumulator, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename CollectiveEpilogue::SharedStorage))>,
    {mainloop}>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue{scheduler}>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

static typename Gemm::Arguments make_args(
    const void* a, const void* b, const void* bias, const void* c, void* d, int m, int n, int k,
    int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd, int sm_count) {{
  typename GemmKernel::StrideA sa = make_stride({stride_a}, int64_t(0));
  typename GemmKernel::StrideB sb = make_stride({stride_b}, int64_t(0));
  typename GemmKernel::StrideC sc = make_stride(ldc, Int<1>{{}}, int64_t(0));
  typename GemmKernel::StrideD sd = make_stride(ldd, Int<1>{{}}, int64_t(0));
  cutlass::KernelHardwareInfo hw;
  hw.device_id = 0;
  hw.sm_count = sm_count;
  typename Gemm::Arguments args{{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {{m, n, k, 1}},
      {{static_cast<const ElementA*>(a), sa, static_cast<const ElementB*>(b), sb}},
      {{{{}}, static_cast<const ElementD*>(c), sc, static_cast<ElementD*>(d), sd}},
      hw}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = {beta};
{bias_arg}
  return args;
}}

// Which operand dims are contiguous: bit 0, A's M (else K); bit 1, B's N (else K)
extern "C" int kp_gemm_layout() {{ return {layout_code}; }}

extern "C" size_t kp_gemm_workspace(int m, int n, int k, int sm_count) {{
  auto args = make_args(nullptr, nullptr, nullptr, nullptr, nullptr, m, n, k, k, k, n, n,
                        sm_count);
  return Gemm::get_workspace_size(args);
}}

// 0: ran; 1: the problem does not fit this kernel; 2: initialisation failed; 3: launch failed
extern "C" int kp_gemm_run(const void* a, const void* b, const void* bias, const void* c,
                           void* d, int m, int n, int k, int64_t lda, int64_t ldb, int64_t ldc,
                           int64_t ldd, void* workspace, int sm_count, void* stream) {{
  auto args = make_args(a, b, bias, c, d, m, n, k, lda, ldb, ldc, ldd, sm_count);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
  auto s = static_cast<cudaStream_t>(stream);
  if (gemm.initialize(args, workspace, s) != cutlass::Status::kSuccess) return 2;
  if (gemm.run(s) != cutlass::Status::kSuccess) return 3;
  return 0;
}}
"""
