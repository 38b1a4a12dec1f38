import os

# Silence Triton 3.9's fp-fusion default warning; the kernels under test do not depend on it.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
