"""On a GPU: keys carry the arch and CUDA version; a real Triton cubin survives the cache."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.cache import KernelArtifact, cache_key, current_arch, store_winner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_cuda_subgraph_key_names_arch_and_cuda(tmp_path):
    from graphs import scaled_tanh, trace

    (sg,) = trace(scaled_tanh, torch.randn(64, 32, device="cuda"))
    key = cache_key(sg.key)
    assert key.arch == current_arch() and key.arch.startswith("sm_")
    assert key.toolchain.cuda == torch.version.cuda


def test_triton_cubin_round_trips_through_store(cache):
    import triton
    import triton.language as tl
    from graphs import scaled_tanh, trace

    @triton.jit
    def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    compiled = copy[(1,)](x, y, x.numel(), BLOCK=1024)
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    cubin = compiled.asm["cubin"]
    (sg,) = trace(scaled_tanh, torch.randn(8, 8, device="cuda"))
    artifact = KernelArtifact("triton", "", compiled.name, binary=cubin)
    key = store_winner(cache, sg, artifact)
    assert cache.get(key).binary == cubin
