"""Probe (issue 57 item 4, "the vocabulary-wide loss at the DRAM roof in bf16"; not run yet):
the row kernels of kernelpro::cross_entropy (ops/cross_entropy_rows.py) at each columns-per-step
BLOCK and warp count, against Inductor's compiled `F.cross_entropy(logits.float(), t)`.

Why: on one H100 (2026-12-06, docs/gpu_runs/2026-12-06-loss-kept-logits/ce_check.json) the op
ran forward + backward at the DRAM roof at 8192 x 128256 (2.16 ms, 1.82x over Inductor) but
0.83x of Inductor at 8192 x 32000 and 0.79x at 1337 x 50257, so the rewrite keeps Inductor's
loss below FUSED_MIN_COLUMNS = 65536 (fx_passes/linear_ce_rewrite.py). Its one choice,
`_warps`, is BLOCK 4096 and 16 warps for every width of 4096 and more (linear_ce_rows.py's,
measured at 32k-128k columns for another kernel). This times the same two kernels (launched
here with other BLOCK/num_warps) per shape, forward and backward apart, checks every config's
loss and gradient against the shipped config's (bit-equal loss order aside: within 1e-5
relative), and prints the best config per shape with its share of the DRAM traffic's time at
the measured roof (bytes: the logits read once forward; read once and the gradient written
once backward).

Decides: `_warps` per width, and whether FUSED_MIN_COLUMNS can come down (then re-run
ce_check.py's comparison and the loss+logits head probe before changing it).

    PYTHONPATH=. OUT=/tmp/out python3 docs/gpu_runs/2026-12-06-ce-rows-tiles/probe.py  # ~1-2 min
Writes $OUT/ce_rows_tiles.json; the table last.
"""

from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from kernelpro_backend.ops.cross_entropy_rows import _kernels, _warps

SHAPES = tuple(
    tuple(int(n) for n in shape.split("x"))
    for shape in os.environ.get(
        "PROBE_SHAPES", "8192x32000,8192x50257,8192x50264,2048x50257,8192x128256"
    ).split(",")
)
BLOCKS = (1024, 2048, 4096, 8192)
WARPS = (4, 8, 16)
IGNORE = -100
ROOF_TBS = 3.0  # about what H100's row kernels reach (BENCHMARKS.md "Rows": 2.95 TB/s measured)


def inductor_ms(x: torch.Tensor, t: torch.Tensor) -> tuple[float, float]:
    fn = torch.compile(lambda a, b: F.cross_entropy(a.float(), b, ignore_index=IGNORE))
    xg = x.clone().requires_grad_()

    def fwd() -> None:
        with torch.no_grad():
            fn(x, t)

    def both() -> None:
        xg.grad = None
        fn(xg, t).backward()

    return do_bench(fwd, warmup=25, rep=100), do_bench(both, warmup=25, rep=100)


def ours(x: torch.Tensor, t: torch.Tensor, block: int, warps: int) -> dict:
    forward, backward = _kernels(False)
    rows, cols = x.shape
    loss = torch.empty(rows, device=x.device)
    lse = torch.empty(rows, device=x.device)
    grad = torch.empty_like(x)
    scale = torch.ones((), device=x.device)

    def fwd() -> None:
        forward[(rows,)](x, x.stride(0), t, loss, lse, cols, IGNORE, block, num_warps=warps)

    def bwd() -> None:
        backward[(rows,)](
            x, x.stride(0), grad, t, lse, scale, scale, 1.0 / rows, cols, IGNORE, block,
            num_warps=warps,
        )  # fmt: skip

    fwd()
    bwd()
    torch.cuda.synchronize()
    out = {"fwd_ms": do_bench(fwd, warmup=25, rep=100), "bwd_ms": do_bench(bwd, warmup=25, rep=100)}
    return out | {"loss": loss.clone(), "grad": grad.clone()}


def case(rows: int, cols: int) -> dict:
    torch.manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16) * 3
    t = torch.randint(0, cols, (rows,), device="cuda")
    t[::7] = IGNORE
    fwd_i, both_i = inductor_ms(x, t)
    shipped = _warps(cols)  # the backward's; the forward's since the first run: shipped_f
    shipped_f = _warps(cols, forward=True)
    ref = ours(x, t, *shipped)
    configs = []
    for block in BLOCKS:
        for warps in WARPS:
            got = ref if (block, warps) == shipped else ours(x, t, block, warps)
            loss_err = float(
                ((got["loss"] - ref["loss"]).abs() / ref["loss"].abs().clamp_min(1e-6)).max()
            )
            grad_err = float(
                (got["grad"].float() - ref["grad"].float()).norm() / ref["grad"].float().norm()
            )
            configs.append({"block": block, "warps": warps, "fwd_ms": round(got["fwd_ms"], 4),
                            "bwd_ms": round(got["bwd_ms"], 4), "ok": loss_err < 1e-5 and grad_err < 1e-2,
                            "loss_rel_err": loss_err, "grad_rel_err": grad_err})  # fmt: skip
    gb = rows * cols * 2 / 1e9  # one pass over bf16 logits
    ok = [c for c in configs if c["ok"]]
    best_f = min(ok, key=lambda c: c["fwd_ms"])
    best_b = min(ok, key=lambda c: c["bwd_ms"])
    return {
        "inductor_fwd_ms": round(fwd_i, 4), "inductor_fwd_bwd_ms": round(both_i, 4),
        "shipped": {"block": shipped[0], "warps": shipped[1], "bwd_ms": round(ref["bwd_ms"], 4),
                    "fwd_block": shipped_f[0], "fwd_warps": shipped_f[1],
                    "fwd_ms": next(c["fwd_ms"] for c in configs
                                   if (c["block"], c["warps"]) == shipped_f)},
        "best_fwd": best_f, "best_bwd": best_b,
        "roof_fwd_ms": round(gb / ROOF_TBS, 4), "roof_bwd_ms": round(2 * gb / ROOF_TBS, 4),
        "configs": configs,
    }  # fmt: skip


def main() -> None:
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": {}}
    for rows, cols in SHAPES:
        out["cases"][f"{rows}x{cols}"] = case(rows, cols)
        print(f"{rows}x{cols} done", flush=True)
        torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "ce_rows_tiles.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"\n{out['device']}  ms (do_bench); fwd+bwd = forward + backward kernels")
    print(f"{'shape':<14}{'Inductor f/f+b':>18}{'shipped f+b':>13}{'best f (B,w)':>20}"
          f"{'best b (B,w)':>20}{'roof f+b':>10}")  # fmt: skip
    for name, c in out["cases"].items():
        s, f, b = c["shipped"], c["best_fwd"], c["best_bwd"]
        print(f"{name:<14}{c['inductor_fwd_ms']:>8.3f} / {c['inductor_fwd_bwd_ms']:<7.3f}"
              f"{s['fwd_ms'] + s['bwd_ms']:>13.3f}{f['fwd_ms']:>9.3f} ({f['block']},{f['warps']:>2})"
              f"{b['bwd_ms']:>12.3f} ({b['block']},{b['warps']:>2})"
              f"{c['roof_fwd_ms'] + c['roof_bwd_ms']:>10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
