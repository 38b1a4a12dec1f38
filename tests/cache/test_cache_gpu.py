"""On a GPU: keys carry the arch and CUDA version; a real Triton cubin survives the cache."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.cache import (
    KernelArtifact,
    Provenance,
    cache_key,
    current_arch,
    store_winner,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_cuda_subgraph_key_names_arch_and_provenance_the_gpu(tmp_path):
    from graphs import scaled_tanh, trace

    (sg,) = trace(scaled_tanh, torch.randn(64, 32, device="cuda"))
    key = cache_key(sg.key)
    assert key.arch == current_arch() and key.arch.startswith("sm_")
    made = Provenance()
    assert made.toolchain.cuda == torch.version.cuda
    assert made.gpu == torch.cuda.get_device_name(0)


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


_TRITON_SCALED_TANH = """
import torch
import triton
import triton.language as tl


@triton.jit
def _scaled_tanh(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    t = tl.where(x < 0, -t, t)
    tl.store(y_ptr + offs, t * 3.0 + 1.0, mask=mask)


def scaled_tanh(x):
    y = torch.empty_like(x)
    n = x.numel()
    compiled = _scaled_tanh[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    scaled_tanh.compiled = compiled
    return [y]
"""


def _import_source(source: str, name: str, directory):
    """Triton's JIT reads source from a file, so the artifact source is written out first."""
    import importlib.util

    path = directory / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_cubin(cubin: bytes, kernel: str) -> None:
    """Load a cubin and find its kernel through the driver API (no compiler involved)."""
    import ctypes

    from kernelpro_backend.runtime.cuda.driver import driver_api

    drv = driver_api()
    (err,) = drv.cuInit(0)
    assert int(err) == 0, err
    try:
        err, module = drv.cuModuleLoadData(cubin)
    except TypeError:  # bindings that take only an address
        buffer = ctypes.create_string_buffer(cubin, len(cubin))
        err, module = drv.cuModuleLoadData(ctypes.addressof(buffer))
    assert int(err) == 0, f"cuModuleLoadData failed: {err}"
    err, _fn = drv.cuModuleGetFunction(module, kernel.encode())
    assert int(err) == 0, f"cuModuleGetFunction({kernel}) failed: {err}"
    drv.cuModuleUnload(module)


def test_triton_cubin_survives_a_bundle_and_a_hit_computes_the_subgraph(tmp_path):
    """A real Triton cubin: store -> bundle export -> import elsewhere comes back byte for byte
    and loads through the driver API; a bundle for another arch is refused; a hit served by
    KernelFinder computes the subgraph (against the eager reference at float32 tolerance)."""
    from graphs import scaled_tanh, trace

    from kernelpro_backend.cache import KernelCache, export_bundle, import_bundle
    from kernelpro_backend.rewrite.providers import CallableKernel

    x = torch.randn(4096, 1024, device="cuda")
    (sg,) = trace(scaled_tanh, x)
    module = _import_source(_TRITON_SCALED_TANH, "kp_scaled_tanh", tmp_path)
    (y,) = module.scaled_tanh(x)
    torch.testing.assert_close(y, scaled_tanh(x))
    compiled = module.scaled_tanh.compiled
    cubin = compiled.asm["cubin"]
    artifact = KernelArtifact(
        language="triton",
        source=_TRITON_SCALED_TANH,
        entry="scaled_tanh",
        launch={"kernel": compiled.name, "num_warps": compiled.metadata.num_warps,
                "shared": compiled.metadata.shared, "block": 1024},
        binary=cubin,
    )  # fmt: skip
    with KernelCache(tmp_path / "a") as a:
        stored_key = store_winner(a, sg, artifact)
        bundle = tmp_path / "bundle.tar.gz"
        assert len(export_bundle(a, bundle)) == 1
    with KernelCache(tmp_path / "c") as c:
        foreign = import_bundle(c, bundle, arch="sm_80" if current_arch() != "sm_80" else "sm_90")
    assert len(foreign.refused) == 1 and not foreign.imported
    with KernelCache(tmp_path / "b") as b:
        report = import_bundle(b, bundle)
        assert not report.refused, report.refused
        back = b.get(stored_key)
        assert back is not None and back.binary == cubin
        _load_cubin(back.binary, back.launch["kernel"])

        def triton_loader(art: KernelArtifact):
            _load_cubin(art.binary, art.launch["kernel"])
            mod = _import_source(art.source, "kp_loaded", tmp_path)
            return CallableKernel(f"cached-{art.entry}", getattr(mod, art.entry))

        # An imported entry runs only after its re-proof here (tests/tuner/test_reprove_gpu.py);
        # here: what it would load computes the subgraph.
        assert "imported" in (b.lookup(stored_key).unproved or "")
        kernel = triton_loader(back)
        inputs = sg.make_inputs(seed=1)
        torch.testing.assert_close(kernel(*inputs)[0], sg.module()(*inputs)[0])
