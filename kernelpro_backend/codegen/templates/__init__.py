"""The kernel templates: each renders one family of `KernelSpec` to source. Triton: GEMM (gemm,
tf32, tf32x3), pointwise and row reductions (rowwise, rowsplit), attention forward and backward
(attention, attention_bwd), vendor-library calls (library); CUDA C++: the row-resident kernel
(cluster) and the CUTLASS 3 GEMM (cutlass).

Must not: read fx nodes, decide legality or defaults (the codegen modules beside this package
do), compile or measure.
"""
