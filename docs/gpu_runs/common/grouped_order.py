"""The grouped tile order the GEMM experiment kernels share (2026-11-26-tf32x3/gpu_tf32x3_forms.py,
2026-11-26-ieee-gemm-forms/gpu_ieee_gemm_forms.py, 2026-11-26-lm-head-prologue/): GROUP_M
row-tiles share each column of B while it is in L2, as the generated GEMM kernels order their tiles (codegen/template_gemm.tile_coords)."""

import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_pid_n)
    first_m = group * GROUP_M
    group_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_pid_n)) % group_m
    pid_n = (pid % (GROUP_M * num_pid_n)) // group_m
    return pid_m, pid_n
