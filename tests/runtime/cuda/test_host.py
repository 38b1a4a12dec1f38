"""The CUTLASS 3 GEMM with a host entry point: configurations are checked on construction, the
source names the schedule, fusion and tile asked for, and, where nvcc and the CUTLASS headers
are present, it compiles for sm_90a into a cached shared library that exports the entry
points and loads without a GPU; the host wrapper refuses operands that do not match the
kernel before any CUDA call. (Running it needs a GPU: tests/runtime/test_cuda_host_gpu.py.)"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
import torch

from kernelpro_backend.codegen.templates.cutlass import (
    ENTRY_POINTS,
    CutlassConfigError,
    CutlassGemm,
)
from kernelpro_backend.runtime.cuda import host as cuda_host
from kernelpro_backend.runtime.cuda.compile import cutlass_include_dirs, find_nvcc
from kernelpro_backend.runtime.errors import CandidateLoadError

needs_nvcc = pytest.mark.skipif(
    find_nvcc() is None or not cutlass_include_dirs(),
    reason="needs nvcc and the CUTLASS headers (nvidia-cutlass or CUTLASS_PATH)",
)


def test_the_source_says_what_was_asked() -> None:
    text = CutlassGemm(activation="gelu", bias=True, tile=(128, 256, 64)).source_text()
    assert "LinCombPerColBiasEltAct" in text and "thread::GELU" in text
    assert "using ElementC = void;" in text  # no source term
    assert "KernelTmaWarpSpecializedPingpong" in text and "Shape<_128, _256, _64>" in text
    text = CutlassGemm(source=True, schedule="cooperative", cluster=(2, 1)).source_text()
    assert "LinCombEltAct" in text and "using ElementC = cutlass::bfloat16_t;" in text
    assert "beta = 1.0f" in text and "Cooperative" in text and "Shape<_2, _1, _1>" in text
    assert "StreamKScheduler" not in text  # the persistent scheduler, CUTLASS's default
    text = CutlassGemm(source=True, schedule="stream_k").source_text()
    assert "CollectiveEpilogue, cutlass::gemm::StreamKScheduler>" in text
    assert "KernelTmaWarpSpecializedCooperative" in text  # stream-K runs cooperative groups


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (dict(dtype="float32"), "dtype"),
        (dict(activation="mish"), "activation"),
        (dict(tile=(128, 96, 64)), "wgmma"),
        (dict(schedule="cooperative", tile=(64, 128, 64)), "pingpong"),
        (dict(schedule="stream_k", tile=(64, 128, 64)), "pingpong"),
        (dict(cluster=(4, 1)), "cluster"),
    ],
)
def test_unbuildable_configurations_are_refused(change: dict, words: str) -> None:
    with pytest.raises(CutlassConfigError, match=words):
        CutlassGemm(**change)


@needs_nvcc
def test_the_stream_k_kernel_compiles_and_exports_the_entry_points(tmp_path):
    source = CutlassGemm(bias=True, source=True, schedule="stream_k").source_text()
    path = cuda_host.compile_library(source, "sm_90a", library_dir=tmp_path, symbols=ENTRY_POINTS)
    assert path.is_file()


@needs_nvcc
def test_compiles_into_a_cached_library_that_exports_the_entry_points(tmp_path, monkeypatch):
    source = CutlassGemm(activation="gelu", bias=True).source_text()
    path = cuda_host.compile_library(source, "sm_90a", library_dir=tmp_path, symbols=ENTRY_POINTS)
    assert path.is_file() and path.suffix == ".so"

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the cached library was rebuilt")

    monkeypatch.setattr(cuda_host, "run_nvcc", no_rebuild)
    again = cuda_host.compile_library(source, "sm_90a", library_dir=tmp_path, symbols=ENTRY_POINTS)
    assert again == path
    with pytest.raises(cuda_host.CudaCompileError, match="kp_missing"):
        cuda_host.compile_library(source, "sm_90a", library_dir=tmp_path, symbols=["kp_missing"])
    gemm = cuda_host.HostGemm(path, bias=True, source=False)  # loads without a GPU
    a, w = torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(16, 8, dtype=torch.bfloat16)
    with pytest.raises(CandidateLoadError, match="do not match"):
        gemm(a, w)  # the kernel adds a bias; none given
    with pytest.raises(CandidateLoadError, match="contiguous"):
        gemm(a.t().contiguous().t(), w, torch.zeros(16, dtype=torch.bfloat16))


@needs_nvcc
def test_a_compile_error_names_the_first_error(tmp_path) -> None:
    bad = (
        CutlassGemm().source_text().replace("using Gemm =", "using Gemm = undefined_t;\nusing X =")
    )
    with pytest.raises(cuda_host.CudaCompileError, match="nvcc: .*error"):
        cuda_host.compile_library(bad, "sm_90a", library_dir=tmp_path)


def test_a_library_built_at_first_use_says_so(monkeypatch, caplog, tmp_path):
    """A cached CUTLASS kernel whose library is not on disk (a cleaned cache, another machine
    before its re-proof) is built on its first call: minutes inside a forward, so it warns."""
    import logging

    from kernelpro_backend.runtime.cuda import driver as cuda_driver
    from kernelpro_backend.runtime.cuda import host as cuda_host

    built = []
    monkeypatch.setattr(cuda_driver, "current_arch", lambda: "sm_90a")
    monkeypatch.setattr(cuda_host, "library_path", lambda source, arch, d=None: tmp_path / "x.so")
    monkeypatch.setattr(
        cuda_host, "compile_library", lambda *a, **k: built.append(a) or tmp_path / "x.so"
    )
    monkeypatch.setattr(cuda_host, "HostGemm", lambda path, bias, source: ("gemm", path))
    monkeypatch.setattr(cuda_host, "_LOADED", {})
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        gemm = cuda_host.library_gemm("// a source", bias=True, source_term=False)
        again = cuda_host.library_gemm("// a source", bias=True, source_term=False)
    assert gemm == again == ("gemm", tmp_path / "x.so") and len(built) == 1
    assert caplog.text.count("building the CUDA library") == 1


@needs_nvcc
def test_a_transposed_layout_is_exported_and_its_strides_are_checked(tmp_path) -> None:
    """A kernel built for A with M contiguous and B with N contiguous says so
    (kp_gemm_layout); the host refuses operands laid out otherwise before any CUDA call."""
    source = CutlassGemm(a_major="m", b_major="n").source_text()
    path = cuda_host.compile_library(source, "sm_90a", library_dir=tmp_path, symbols=ENTRY_POINTS)
    gemm = cuda_host.HostGemm(path, bias=False, source=False)
    assert (gemm.a_major, gemm.b_major) == ("m", "n")
    a, b = torch.zeros(16, 8, dtype=torch.bfloat16), torch.zeros(24, 8, dtype=torch.bfloat16)
    with pytest.raises(CandidateLoadError, match="a's columns must be contiguous"):
        gemm(a, b.t().contiguous().t())
    with pytest.raises(CandidateLoadError, match="b's columns must be contiguous"):
        gemm(a.t().contiguous().t(), b)


_EXPORTS = (
    "int kp_gemm_run(void) { return 0; }\nunsigned long kp_gemm_workspace(void) { return 0; }\n"
)
_CONSTRUCTOR = """#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w");
    if (f) fclose(f);
}
"""


def _shared_object(tmp_path, name: str, text: str) -> bytes:
    source = tmp_path / f"{name}.c"
    source.write_text(text)
    out = tmp_path / f"{name}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out.read_bytes()


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_a_library_planted_at_the_cache_path_is_never_loaded(tmp_path, monkeypatch, caplog):
    """The library's cache path is predictable; one put there whose constructor would run on
    `ctypes.CDLL` is refused and the library built again: the constructor never runs."""
    import logging

    from kernelpro_backend.runtime.cuda import built

    marker = tmp_path / "constructor-ran"
    planted = _shared_object(tmp_path, "planted", _CONSTRUCTOR % marker + _EXPORTS)
    ours = _shared_object(tmp_path, "ours", _EXPORTS)
    monkeypatch.setattr(built, "_BUILT", {})
    monkeypatch.setattr(cuda_host, "find_nvcc", lambda: "/opt/fake/nvcc")
    monkeypatch.setattr(cuda_host, "nvcc_version", lambda nvcc: "nvcc fake")
    monkeypatch.setattr(cuda_host, "cutlass_include_dirs", lambda: ["/opt/fake/cutlass"])
    monkeypatch.setattr(cuda_host, "run_nvcc", lambda *args, **kwargs: ours)
    source, library_dir = "// a CUTLASS GEMM", tmp_path / "cubin"
    name = cuda_host.library_path(source, "sm_90a", library_dir)
    name.parent.mkdir(parents=True)
    name.write_bytes(planted)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        assert not cuda_host.is_built(source, "sm_90a", library_dir)
        path = cuda_host.compile_library(
            source, "sm_90a", library_dir=library_dir, symbols=["kp_gemm_run"]
        )
    cuda_host.HostGemm(path, bias=False, source=False)  # ctypes.CDLL: constructors run here
    assert not marker.exists()
    assert "no record of building it" in caplog.text
    assert path.read_bytes() == ours and cuda_host.is_built(source, "sm_90a", library_dir)
    # The check is real: the planted library's constructor does run when it is loaded.
    ctypes.CDLL(str(name))
    assert marker.exists()
