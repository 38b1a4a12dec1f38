"""rewrite/access_memo.py: torch's access analysis runs once per kernelpro kernel and argument
signature; other kernels, other signatures and unknown argument types reach torch every time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelpro_backend.rewrite import access_memo

triton = pytest.importorskip("triton")
wrap = pytest.importorskip("torch._higher_order_ops.triton_kernel_wrap")

_SOURCE = """
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
"""


def _load(tmp_path: Path, name: str) -> Any:
    path = tmp_path / f"{name}.py"
    path.write_text(_SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    from triton.runtime.jit import JITFunction

    # under TRITON_INTERPRET=1 `@triton.jit` gives an interpreted function: the JITFunction
    # Inductor's analysis sees on a GPU is built from the same Python function
    kernel = module.scale
    return kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """torch's analysis replaced by a recorder (on the CPU it has no Triton target to run)."""
    seen: list[Any] = []

    def analysis(kernel: Any, kwargs: dict[str, Any], tma: Any) -> list[str]:
        seen.append(kernel)
        return ["y_ptr"]

    access_memo.uninstall()
    for name in ("identify_accessed_tensors", "identify_mutated_tensors"):
        monkeypatch.delattr(wrap, name, raising=False)
    monkeypatch.setattr(wrap, "identify_accessed_tensors", analysis, raising=False)
    assert access_memo.install()
    yield seen
    access_memo.uninstall()


def _args(dtype: torch.dtype = torch.float32, n: int = 1000) -> dict[str, Any]:
    return {"x_ptr": torch.empty(8, dtype=dtype), "y_ptr": torch.empty(8, dtype=dtype), "n": n}


def test_a_generated_kernel_is_analysed_once_for_every_site_with_its_signature(
    tmp_path: Path, calls: list[Any]
) -> None:
    kernel = _load(tmp_path, "kernelpro_generated_memo_a")
    answers = [
        wrap.identify_accessed_tensors(kernel, {**_args(), "BLOCK": 128}, {}) for _ in range(3)
    ]
    assert len(calls) == 1
    assert answers == [["y_ptr"]] * 3
    assert answers[0] is not answers[1]  # each caller owns its answer

    # a second load of the same source (a kernel rebuilt for another subgraph) shares it
    again = _load(tmp_path, "kernelpro_generated_memo_a")
    wrap.identify_accessed_tensors(again, {**_args(), "BLOCK": 128}, {})
    assert len(calls) == 1


def test_another_dtype_constant_or_scalar_value_is_analysed_again(
    tmp_path: Path, calls: list[Any]
) -> None:
    kernel = _load(tmp_path, "kernelpro_generated_memo_b")
    wrap.identify_accessed_tensors(kernel, {**_args(), "BLOCK": 128}, {})
    wrap.identify_accessed_tensors(kernel, {**_args(torch.bfloat16), "BLOCK": 128}, {})
    wrap.identify_accessed_tensors(kernel, {**_args(), "BLOCK": 256}, {})
    wrap.identify_accessed_tensors(kernel, {**_args(n=1), "BLOCK": 128}, {})
    assert len(calls) == 4
    # Inductor passes sizes as sympy expressions: memoised by their text
    import sympy

    for _ in range(2):
        wrap.identify_accessed_tensors(
            kernel, {**_args(), "n": sympy.Integer(1000), "BLOCK": 128}, {}
        )
    assert len(calls) == 5


def test_a_users_kernel_and_an_unknown_argument_reach_torch_every_time(
    tmp_path: Path, calls: list[Any]
) -> None:
    users = _load(tmp_path, "my_model_kernels_memo")
    for _ in range(2):
        wrap.identify_accessed_tensors(users, {**_args(), "BLOCK": 128}, {})
    ours = _load(tmp_path, "kernelpro_generated_memo_c")
    for _ in range(2):
        wrap.identify_accessed_tensors(ours, {**_args(), "BLOCK": 128, "n": object()}, {})
    for _ in range(2):  # called by keyword: passed on as called
        wrap.identify_accessed_tensors(kernel=ours, kwargs={**_args(), "BLOCK": 8}, tma={})
    assert len(calls) == 6


def test_uninstall_gives_torch_its_analysis_back(calls: list[Any]) -> None:
    assert wrap.identify_accessed_tensors is not None
    wrapped = wrap.identify_accessed_tensors
    access_memo.uninstall()
    assert wrap.identify_accessed_tensors is wrapped.__wrapped__
