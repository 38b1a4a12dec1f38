"""GPU check of the kernel cache (run by the lead on the H100; ~1 minute).

What it proves on the device: keys of CUDA subgraphs carry the GPU arch (sm_90) and the CUDA
toolchain; a real Triton cubin survives store -> bundle export -> import byte for byte and loads
through the CUDA driver API (cuModuleLoadData: no nvcc); a cached hit served by CacheProvider
computes the subgraph (checked against the eager reference at float32 tolerances); how long a
lookup takes; and 8 processes x 50 puts lose no entry.

    # diskcache is not in the GPU image: bash ../shared/gpu/wheels.sh here, carry .whl, then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:$PWD OUT=/tmp/out python3 scripts/gpu_cache.py

Writes $OUT/gpu_cache.json and prints a short table last.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

try:
    import diskcache  # noqa: F401
except ImportError:
    sys.exit("diskcache is missing: install its wheel first (../shared/gpu/wheels.sh)")

from kernelpro_backend.cache import (
    CacheProvider,
    KernelArtifact,
    KernelCache,
    Provenance,
    cache_key,
    current_arch,
    current_toolchain,
    export_bundle,
    import_bundle,
    store_winner,
)
from kernelpro_backend.fx_passes import SubgraphKey, find_subgraphs
from kernelpro_backend.options import Options
from kernelpro_backend.providers import CallableKernel

TRITON_SOURCE = """
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


def scaled_tanh_ref(x):
    return torch.tanh(x) * 3.0 + 1.0


def import_source(source: str, name: str, directory: Path):
    """Triton's JIT reads source from a file, so the artifact source is written out first."""
    path = directory / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def driver():
    try:
        from cuda.bindings import driver as drv
    except ImportError:
        from cuda import cuda as drv  # cuda-python < 12.6
    return drv


def load_cubin(cubin: bytes, name: str) -> None:
    """Load a cubin and find its kernel through the driver API, as the runtime's loader will."""
    drv = driver()
    (err,) = drv.cuInit(0)
    assert int(err) == 0, err
    try:
        err, module = drv.cuModuleLoadData(cubin)
    except TypeError:  # bindings that take only an address
        buffer = ctypes.create_string_buffer(cubin, len(cubin))
        err, module = drv.cuModuleLoadData(ctypes.addressof(buffer))
    assert int(err) == 0, f"cuModuleLoadData failed: {err}"
    err, _fn = drv.cuModuleGetFunction(module, name.encode())
    assert int(err) == 0, f"cuModuleGetFunction({name}) failed: {err}"
    drv.cuModuleUnload(module)


def bench_ms(fn, *args) -> float:
    import triton.testing

    return float(triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=100))


def put_many(directory: str, worker: int, count: int) -> int:
    with KernelCache(directory) as cache:
        for i in range(count):
            structure = hashlib.sha256(f"{worker}/{i}".encode()).hexdigest()
            key = cache_key(SubgraphKey(structure, (((8,), (1,), "float32"),), "sm_90", "ieee"))
            cache.put(key, KernelArtifact("python", "", f"k{worker}_{i}"))
    return count


def main() -> int:
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"toolchain": current_toolchain().to_dict(), "arch": current_arch()}
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    arch = current_arch()
    work = Path(tempfile.mkdtemp(prefix="kp-cache-gpu-"))

    # 1. A CUDA subgraph's key carries the arch; the cache key the CUDA toolchain.
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(4096, 1024, device="cuda")
    (sg,) = find_subgraphs(make_fx(scaled_tanh_ref, tracing_mode="fake")(x), "inference")
    key = cache_key(sg.key)
    assert sg.key.device == arch, (sg.key.device, arch)
    assert key.toolchain.cuda != "none", key.toolchain
    results["key"] = {"short": key.short(), "arch": key.arch, "cuda": key.toolchain.cuda}

    # 2. Compile the Triton kernel, check it, time it against eager.
    module = import_source(TRITON_SOURCE, "kp_scaled_tanh", work)
    (y,) = module.scaled_tanh(x)
    torch.testing.assert_close(y, scaled_tanh_ref(x))
    compiled = module.scaled_tanh.compiled
    cubin = compiled.asm["cubin"]
    kernel_ms, eager_ms = bench_ms(module.scaled_tanh, x), bench_ms(scaled_tanh_ref, x)
    artifact = KernelArtifact(
        language="triton",
        source=TRITON_SOURCE,
        entry="scaled_tanh",
        launch={"kernel": compiled.name, "num_warps": compiled.metadata.num_warps,
                "shared": compiled.metadata.shared, "block": 1024},
        binary=cubin,
        kernel_ms=kernel_ms,
        baselines_ms={"eager": eager_ms},
        provenance=Provenance(search_log="gpu_cache.py"),
    )  # fmt: skip

    # 3. Store, export, import elsewhere: the cubin comes back byte for byte and loads.
    with KernelCache(work / "a") as a:
        stored_key = store_winner(a, sg, artifact)
        bundle = work / "bundle.tar.gz"
        assert len(export_bundle(a, bundle)) == 1
    with KernelCache(work / "b") as b:
        report = import_bundle(b, bundle)
        assert not report.refused, report.refused
        back = b.get(stored_key)
        assert back is not None and back.binary == cubin
        load_cubin(back.binary, back.launch["kernel"])
        with KernelCache(work / "c") as c:
            foreign = import_bundle(c, bundle, arch="sm_80")
        assert len(foreign.refused) == 1 and not foreign.imported

        # 4. A hit through the provider computes the subgraph.
        def triton_loader(art: KernelArtifact):
            load_cubin(art.binary, art.launch["kernel"])
            mod = import_source(art.source, "kp_loaded", work)
            return CallableKernel(f"cached-{art.entry}", getattr(mod, art.entry))

        provider = CacheProvider(b, Options(), triton_loader)
        kernel = provider.find(sg)
        assert kernel is not None
        inputs = sg.make_inputs(seed=1)
        torch.testing.assert_close(kernel(*inputs)[0], sg.module()(*inputs)[0])
        lookups = []
        for _ in range(200):
            t0 = time.perf_counter()
            b.get(stored_key)
            lookups.append((time.perf_counter() - t0) * 1e3)
    results.update(
        cubin_bytes=len(cubin), kernel_ms=kernel_ms, eager_ms=eager_ms,
        lookup_ms_median=statistics.median(lookups), bundle_bytes=bundle.stat().st_size,
    )  # fmt: skip

    # 5. Concurrent writers.
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        pool.starmap(put_many, [(str(work / "conc"), w, 50) for w in range(8)])
    with KernelCache(work / "conc") as conc:
        stored = sum(1 for _ in conc.entries())
    results.update(concurrent_entries=stored, concurrent_s=time.perf_counter() - t0)
    assert stored == 400, stored

    (out / "gpu_cache.json").write_text(json.dumps(results, indent=1))
    rows = [
        ("arch / cuda", f"{arch} / {key.toolchain.cuda}"),
        ("cubin bytes (store == bundle == import)", len(cubin)),
        ("triton kernel ms / eager ms", f"{kernel_ms:.4f} / {eager_ms:.4f}"),
        ("cache.get median ms (200 lookups)", f"{results['lookup_ms_median']:.3f}"),
        ("concurrent entries (8 procs x 50)", f"{stored} in {results['concurrent_s']:.1f}s"),
        ("foreign arch import refused", foreign.refused[0].reason),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
