"""The custom torch ops that compute: the LM head and its cross-entropy in chunks
(linear_ce, its row kernels linear_ce_rows in Triton and linear_ce_rows_cuda in CUDA C++), the
cross-entropy of logits the model keeps (cross_entropy, cross_entropy_rows), the CUTLASS 3 GEMM
and convolution called from Inductor's code (cutlass_gemm, cutlass_conv); and `fast_op`, how
every operator of kernelpro (these and rewrite/'s launch and dispatch) is registered with the
dispatcher.

Must not: decide when an op is used (fx_passes/ and rewrite/ put them into graphs), render or
compile kernel sources (codegen/ and runtime/ do).
"""
