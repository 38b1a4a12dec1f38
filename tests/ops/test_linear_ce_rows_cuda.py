"""The CUDA cross-entropy row kernel (the row in shared memory): its source compiles with nvcc
for both 16-bit types (CPU, where nvcc is installed); on the GPU it matches the ATen twin —
loss, gradient in place, ignored targets, masked vocabularies, logits untouched without
gradients — and where it cannot run (widths, dtypes, layouts) it says why and the Triton kernel
gives the same answer."""

from __future__ import annotations

import pytest
import torch

from kernelpro_backend.ops import linear_ce_rows_cuda as cuda_rows
from kernelpro_backend.ops.linear_ce_rows import cross_entropy_rows, rows_aten
from kernelpro_backend.runtime.cuda.compile import compile_cuda, find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed here")
gpu = pytest.mark.gpu
needs_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="needs a CUDA GPU of sm_90 or later",
)


@needs_nvcc
@pytest.mark.parametrize("fp16", [False, True])
def test_the_source_compiles_for_hopper(fp16, tmp_path):
    cubin = compile_cuda(
        cuda_rows.source(fp16), "sm_90a", kernels=[cuda_rows.KERNEL], cubin_dir=tmp_path
    )
    assert cuda_rows.KERNEL.encode() in cubin.data and not cubin.cached


def test_cpu_logits_are_not_its_to_run():
    logits, target = torch.zeros(2, 64, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.long)
    assert cuda_rows.unavailable(logits, target) == "the logits are not on a CUDA device"


def _case(rows: int, cols: int, dtype: torch.dtype, seed: int = 0):  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = (torch.randn(rows, cols, device="cuda", generator=g) * 3).to(dtype)
    target = torch.randint(0, cols, (rows,), device="cuda", generator=g)
    target[1::5] = -100
    return logits, target


@gpu
@needs_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols", [8, 1000, 32000, 50304])
def test_the_kernel_matches_its_aten_twin_on_the_gpu(dtype, cols):
    logits, target = _case(37, cols, dtype)
    assert cuda_rows.unavailable(logits, target) is None
    scale = 1 / 37
    want = logits.clone()
    want_loss = rows_aten(want, target, scale, -100, True)
    got = logits.clone()
    loss = torch.empty(37, device="cuda")
    assert cuda_rows.run(got, target, loss, scale, -100, True)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-3)
    assert (loss[1::5] == 0).all() and not got[1::5].any()  # ignored rows: no loss, no gradient
    untouched = logits.clone()
    assert cuda_rows.run(untouched, target, loss, scale, -100, False)
    assert torch.equal(untouched, logits)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=2e-5)


@gpu
@needs_hopper
def test_masked_vocabulary_entries_and_ties_on_the_gpu():
    cols = 4096
    logits = torch.randn(3, cols, device="cuda")
    logits[0, 100:] = float("-inf")
    logits[1] = 0.25
    logits[2, -1] = 40.0
    logits = logits.bfloat16()
    target = torch.tensor([7, 4095, 3], device="cuda")
    want = logits.clone()
    want_loss = rows_aten(want, target, 0.5, -100, True)
    got = logits.clone()
    loss = torch.empty(3, device="cuda")
    assert cuda_rows.run(got, target, loss, 0.5, -100, True)
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-3)


@gpu
@needs_hopper
@pytest.mark.parametrize(
    ("cols", "dtype", "why"),
    [
        (50257, torch.bfloat16, "rows do not start on 16 bytes"),  # GPT-2 vocabulary
        (128256, torch.bfloat16, "does not fit in shared memory"),  # Llama 3
        (1000, torch.float32, "the kernel takes bf16 and fp16"),
    ],
)
def test_where_it_cannot_run_it_says_why_and_the_triton_kernel_answers(cols, dtype, why):
    logits, target = _case(5, cols, dtype, seed=1)
    assert why in str(cuda_rows.unavailable(logits, target))
    want = logits.clone()
    want_loss = rows_aten(want, target, 0.2, -100, True)
    got = logits.clone()
    loss = cross_entropy_rows(got, target, 0.2, -100, True)
    tol = {"rtol": 2e-2, "atol": 1e-3} if dtype != torch.float32 else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(got, want, **tol)


@gpu
@needs_hopper
def test_a_strided_view_of_the_rows_goes_to_the_triton_kernel():
    logits, target = _case(6, 1032, torch.bfloat16, seed=2)
    view = logits[:, 4:1028]  # rows start 8 bytes in
    assert cuda_rows.unavailable(view, target) == "rows do not start on 16 bytes"
    assert cuda_rows.unavailable(logits, target[::1].to(torch.int32)) == (
        "targets not contiguous int64"
    )


@gpu
@needs_hopper
@pytest.mark.parametrize("mean", [True, False])
@pytest.mark.parametrize("loss_dtype", [torch.float32, torch.bfloat16])
def test_the_last_chunks_launch_finishes_the_loss_as_the_finishing_kernel_does(mean, loss_dtype):
    from kernelpro_backend.ops.linear_ce_rows import Finish, finish

    logits, target = _case(1000, 4096, torch.bfloat16, seed=3)
    losses = torch.empty(1000, device="cuda")
    for _ in range(3):  # the counter is set back to 0 by each launch: every call finishes
        then = Finish(
            losses, target, mean, torch.empty((), device="cuda", dtype=loss_dtype),
            torch.empty((), device="cuda"),
        )  # fmt: skip
        first, second = logits[:600].clone(), logits[600:].clone()
        assert cuda_rows.run(first, target[:600], losses[:600], 0.5, -100, True)
        assert cuda_rows.run(second, target[600:], losses[600:], 0.5, -100, True, then)
        assert then.done
        want_loss, want_factor = finish(losses.cpu(), target.cpu(), -100, mean, loss_dtype)
        torch.testing.assert_close(then.loss.cpu(), want_loss, rtol=1e-5, atol=0)
        torch.testing.assert_close(then.factor.cpu(), want_factor.float(), rtol=0, atol=0)
    every = logits.clone()
    want_rows = rows_aten(every, target, 0.5, -100, True)
    torch.testing.assert_close(losses, want_rows, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(torch.cat([first, second]), every, rtol=2e-2, atol=1e-3)


@gpu
@needs_hopper
def test_under_a_capture_with_no_counter_yet_the_caller_finishes():
    from kernelpro_backend.ops.linear_ce_rows import Finish

    logits, target = _case(8, 1024, torch.bfloat16, seed=4)
    losses = torch.empty(8, device="cuda")
    assert cuda_rows.run(logits, target, losses, 0.125, -100, False)  # loaded before the capture
    loss, factor = torch.empty((), device="cuda"), torch.empty((), device="cuda")
    stream = torch.cuda.Stream()
    cuda_rows._COUNTERS.pop((0, stream.cuda_stream), None)
    graph = torch.cuda.CUDAGraph()
    then = Finish(losses, target, True, loss, factor)
    with torch.cuda.graph(graph, stream=stream):
        assert cuda_rows.run(logits, target, losses, 0.125, -100, False, then)
    assert not then.done and (0, stream.cuda_stream) not in cuda_rows._COUNTERS
    graph.replay()
    torch.testing.assert_close(losses, rows_aten(logits, target, 0.125, -100, False))


@pytest.mark.parametrize("finishing", [False, True])
def test_the_launch_passes_the_kernels_parameters_in_order(monkeypatch, finishing):
    """The ctypes values `run` launches with, on the CPU with a fake kernel and stream: the
    kernel's 16 parameters, the finish's 8 null where it is not asked."""
    import ctypes
    from types import SimpleNamespace

    from kernelpro_backend.ops.linear_ce_rows import Finish

    launched = []
    fake = SimpleNamespace(device=0, launch=lambda *a: launched.append(a))
    monkeypatch.setattr(cuda_rows, "load", lambda logits: fake)
    monkeypatch.setattr(cuda_rows, "counter", lambda device, stream: 4096)
    monkeypatch.setattr(
        torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=77)
    )
    logits, target = torch.zeros(3, 16, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.long)
    loss, everything = torch.zeros(3), torch.zeros(5)
    then = Finish(everything, torch.zeros(5, dtype=torch.long), True, torch.zeros(()),
                  torch.zeros(()))  # fmt: skip
    assert cuda_rows.run(logits, target, loss, 0.5, -100, True, then if finishing else None)
    ((grid, threads, smem, values, _, stream),) = launched
    assert (grid, threads, smem, stream) == (3, cuda_rows.THREADS, 32, 77)
    kinds = [type(v) for v in values]
    assert kinds == [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p,
                     ctypes.c_float, ctypes.c_int, ctypes.c_longlong, ctypes.c_int,
                     ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                     ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]  # fmt: skip
    got = [v.value for v in values]
    assert got[:8] == [logits.data_ptr(), 16, target.data_ptr(), loss.data_ptr(), 0.5, 16,
                       -100, 1]  # fmt: skip
    if finishing:
        assert got[8:] == [4096, everything.data_ptr(), then.target.data_ptr(), 5,
                           then.loss.data_ptr(), 1, then.factor.data_ptr(), 1]  # fmt: skip
        assert then.done
    else:
        assert got[8:] == [None, None, None, 0, None, 0, None, 0]  # null pointers, zeros
