"""What the tf32x3 drivers (gpu_tf32x3_tiles.py, gpu_tf32x3_template_ab.py,
gpu_tf32x3_forms.py, gpu_tf32x3_pdl.py) share: a float32 GEMM subgraph under tf32x3 with its float64 and
IEEE cuBLAS references, one variant checked and timed against them, and the JSON they write."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from scripts_common import median_ms


class _Linear(torch.nn.Module):
    """x @ w.T with an nn.Linear weight [N, K] (B K-major)."""

    def __init__(self, k: int, n: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n, k) / k**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w.t()


def gemm_case(
    n: int, layout: str = "mm", m: int | None = None, k: int | None = None
) -> tuple[Any, Any, list[torch.Tensor], torch.Tensor, dict]:
    """(subgraph, its tf32x3 library form, inputs, float64 result, row with IEEE cuBLAS's time
    and error) for an m x n x k float32 GEMM (square by default): `x @ w` with w [K, N] ("mm")
    or `x @ w.T` with w [N, K] ("linear")."""
    from kernelpro_backend.bench.gemm_cases import MatMul
    from kernelpro_backend.bench.gemm_sweep import gemm_subgraph
    from kernelpro_backend.codegen import alternatives
    from kernelpro_backend.lowering import lower

    m, k = m or n, k or n
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    model = (MatMul(k, n) if layout == "mm" else _Linear(k, n)).cuda()
    sg = gemm_subgraph(model, (torch.randn(m, k, device="cuda"),), "tf32x3")
    (form,) = [a for a in alternatives(lower(sg)) if a.template == "gemm_library"]
    inputs = sg.make_inputs(0, "cuda")
    exact = sg.module().double()(*[t.double() for t in inputs])[0]
    row: dict = {"n": n, "m": m, "k": k, "layout": layout}
    row["ieee_ms"] = median_ms(lambda: sg.module()(*inputs))
    row["ieee_error"] = (sg.module()(*inputs)[0].double() - exact).abs().max().item()
    return sg, form, inputs, exact, row


def named_case(text: str) -> tuple[Any, Any, list[torch.Tensor], torch.Tensor, dict]:
    """`gemm_case` of 'N:layout' (square) or 'MxNxK:layout' (layout mm, the default, or linear)."""
    size, _, layout = text.partition(":")
    m, n, k = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
    return gemm_case(n, layout or "mm", m, k)


def measure(entry: dict, make: Callable[[], Callable[[], torch.Tensor]], exact: torch.Tensor,
            row: dict) -> None:  # fmt: skip
    """Fill `entry` with the variant's error against `exact`, whether it is within IEEE's
    (`row`), its median time and speed-up over IEEE cuBLAS; or with why it failed."""
    try:
        fn = make()
        entry["error"] = (fn().double() - exact).abs().max().item()
        entry["ok"] = entry["error"] <= row["ieee_error"]
        entry["ms"] = median_ms(fn)
        entry["x_ieee"] = round(row["ieee_ms"] / entry["ms"], 3)
    except Exception as e:
        entry["failed"] = f"{type(e).__name__}: {e}"[:300]


def text(entry: dict) -> str:
    return entry.get("failed") or (
        f"{entry['ms']:.4f} ms  {entry['x_ieee']:.2f}x  error {entry['error']:.2e}"
        f"{'' if entry['ok'] else '  (MORE THAN IEEE)'}"
    )


def report(name: str, rows: list[dict], key: str, label: Callable[[dict], str]) -> None:
    """Write $OUT/<name>.json and print each size's IEEE cuBLAS line, then its variants
    (`row[key]`, each named by `label`)."""
    write(name, rows)
    for row in rows:
        shape = (
            f"{row['m']}x{row['n']}x{row['k']} {row['layout']}" if "m" in row else f"{row['n']}^3"
        )
        print(f"{shape}  IEEE cuBLAS {row['ieee_ms']:.4f} ms  error {row['ieee_error']:.2e}")
        for entry in row[key]:
            print(f"   {label(entry):34s} {text(entry)}")


def write(name: str, rows: list[dict]) -> None:
    """$OUT/<name>.json with the device and date."""
    meta = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(os.path.join(os.environ.get("OUT", "."), f"{name}.json"), "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
