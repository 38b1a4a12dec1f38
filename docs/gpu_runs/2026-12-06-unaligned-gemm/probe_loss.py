"""Probe: an LM head whose vocabulary breaks 16-byte alignment (50257, 32001) against the same
head padded (50264, 32008), with the loss INSIDE the compiled graph as Hugging Face writes it
(`logits = head(x); loss = F.cross_entropy(logits.float().view(-1, V), labels)`), bf16 autocast
entered outside over float32 weights, forward and forward + loss.backward(). Forms:
- "head": the head alone, backward from a given contiguous dY (probe.py's case: dY comes from
  outside the graph, as after Hugging Face GPT-2's graph break between the head and the loss);
- "loss": the loss returned; "loss+logits": the loss and the logits returned (as HF's models);
- "-dyn" suffix: compiled with dynamic=True (Inductor pads no strides with dynamic shapes).
Modes: Inductor; kernelpro (search="cache-only", fresh cache: the fallback plus the torch-level
rewrites, pad_gemm among them). A third mode, "kp-forced", ran pad_gemm where its rule then
left the padding to Inductor's comprehensive padding (dY written in the graph); it was 1-2%
faster on the step (2026-12-06, unaligned_loss-h100*.txt), so the rule pads there now and
"kernelpro" is that mode. "kp-ce" (loss+logits forms): kernelpro with the kept-logits loss
rewrite allowed from 16384 columns (fx_passes/linear_ce_rewrite.FUSED_MIN_COLUMNS, 65536 by
default): kernelpro::cross_entropy's row kernels ran 1.34x over Inductor's at 8192 x 50257 alone
(ce-rows-tiles), but their gradient is then padded by a copy. Interleaved rounds, CUDA events. Also records how many linears
pad_gemm padded, and Inductor's own padding counters (pad_mm's benchmarks, comprehensive
padding) per compile.

Done-when of issue 57 item 3: kernelpro at 50257 within 10% of the padded shape's time.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-unaligned-gemm/probe_loss.py

Env: PROBE_ROUNDS (default 5), PROBE_CASES (comma list of case names, default all),
PROBE_PROFILE=1: also each mode's GPU kernels over 3 forward+backward steps (torch.profiler,
summed by kernel name, the top 8), to tell where an unaligned head's time goes.
Writes $OUT/unaligned_loss.json; the table is printed last.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import torch
import torch.nn.functional as F
from probe import time_ms  # probe.py beside this file: the same CUDA-event timing

from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes import linear_ce_rewrite

SHAPES = {"gpt2": (8192, 768, (50257, 50264)), "llama": (4096, 4096, (32001, 32008))}
# case: (shape, vocab, form, modes)
CASES = {
    f"{shape}-{v}-{form}": (shape, v, form, modes)
    for shape, forms in (
        ("gpt2", ("head", "loss", "loss+logits", "loss-dyn")),
        ("llama", ("loss+logits",)),
    )
    for form in forms
    for i, v in enumerate(SHAPES[shape][2])
    for modes in [("inductor", "kernelpro", "kp-ce") if form == "loss+logits" else ("inductor", "kernelpro")]
}  # fmt: skip
CE_MIN_COLUMNS = 16384  # "kp-ce": the rewrite's gate while its graph compiles
ITERS = 10


class Head(torch.nn.Module):
    def __init__(self, hidden: int, vocab: int, form: str) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden, vocab, bias=False)
        self.form, self.vocab = form.removesuffix("-dyn"), vocab

    def forward(self, x: torch.Tensor, labels: torch.Tensor):
        logits = self.proj(x)
        if self.form == "head":
            return logits
        loss = F.cross_entropy(logits.float().view(-1, self.vocab), labels.view(-1))
        return (loss, logits) if self.form == "loss+logits" else loss


def compiled(model: torch.nn.Module, mode: str, cache: str, dynamic: bool, log: dict):
    if mode == "inductor":
        return torch.compile(model, dynamic=dynamic)
    sessions: list = []
    log["sessions"] = sessions
    options = {"search": "cache-only", "cache_dir": cache, "progress": False}
    inner = make_backend(sessions=sessions)
    return torch.compile(model, backend=inner, options=options, dynamic=dynamic)


def inductor_counts() -> dict:
    from torch._dynamo.utils import counters
    from torch._inductor import metrics

    return {"pad_mm_bench": counters["inductor"]["pad_mm_bench"],
            "comprehensive_padding": metrics.num_comprehensive_padding}  # fmt: skip


def kernel_profile(run, steps: int = 3, top: int = 8) -> list[tuple[str, float]]:
    """(kernel name cut to 90 characters, us per step) for the `top` kernels by GPU time."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run()
        torch.cuda.synchronize()
    per: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:90]] = per.get(e.name[:90], 0.0) + e.device_time_total / steps
    return sorted(per.items(), key=lambda kv: -kv[1])[:top]


def run_case(name: str, rounds: int, cache: str) -> dict:
    shape, vocab, form, modes = CASES[name]
    tokens, hidden, _ = SHAPES[shape]
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Head(hidden, vocab, form).cuda()
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,), device="cuda")
    dy = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16)

    def call(fn):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return fn(x, labels)

    def step(fn):
        def run() -> None:
            x.grad = None
            model.proj.weight.grad = None
            out = call(fn)
            if form == "head":
                out.backward(dy)
            else:
                (out[0] if isinstance(out, tuple) else out).backward()

        return run

    fns, logs = {}, {}
    for mode in modes:
        logs[mode] = {"before": inductor_counts()}
        t0 = time.perf_counter()
        fns[mode] = compiled(model, mode, cache, form.endswith("-dyn"), logs[mode])
        gate = linear_ce_rewrite.FUSED_MIN_COLUMNS
        if mode == "kp-ce":
            linear_ce_rewrite.FUSED_MIN_COLUMNS = CE_MIN_COLUMNS
        try:
            step(fns[mode])()  # compiles forward and backward
        finally:
            linear_ce_rewrite.FUSED_MIN_COLUMNS = gate
        torch.cuda.synchronize()
        logs[mode]["compile_s"] = round(time.perf_counter() - t0, 1)
        logs[mode]["after"] = inductor_counts()
    times: dict[str, dict[str, list[float]]] = {m: {"fwd": [], "fwd_bwd": []} for m in modes}
    for mode in modes:
        time_ms(lambda: call(fns[mode]), 2), time_ms(step(fns[mode]), 2)  # noqa: B023
    for _ in range(rounds):
        for mode in modes:
            times[mode]["fwd"].append(time_ms(lambda: call(fns[mode])))  # noqa: B023
            times[mode]["fwd_bwd"].append(time_ms(step(fns[mode])))
    med = {m: {k: sorted(v)[len(v) // 2] for k, v in t.items()} for m, t in times.items()}
    if os.environ.get("PROBE_PROFILE") == "1":
        for mode in modes:
            logs[mode]["kernels_us"] = kernel_profile(step(fns[mode]))
    for log in logs.values():
        sessions = log.pop("sessions", [])
        log["pad_gemm"] = sum(s.rewrites.get("pad_gemm", 0) for s in sessions)
        log["linear_cross_entropy"] = sum(
            s.rewrites.get("linear_cross_entropy", 0) for s in sessions
        )
    return {"shape": [tokens, hidden, vocab], "form": form, "median_ms": med, "rounds_ms": times,
            "compiles": logs}  # fmt: skip


def main() -> None:
    rounds = int(os.environ.get("PROBE_ROUNDS", "5"))
    names = [n for n in os.environ.get("PROBE_CASES", ",".join(CASES)).split(",") if n]
    cache = tempfile.mkdtemp(prefix="kp-unaligned-loss-")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": {}}
    t0 = time.perf_counter()
    for name in names:
        out["cases"][name] = run_case(name, rounds, cache)
        case = out["cases"][name]
        pads = {m: (c["pad_gemm"], c["after"]["comprehensive_padding"]
                    - c["before"]["comprehensive_padding"]) for m, c in case["compiles"].items()}  # fmt: skip
        print(name, json.dumps(case["median_ms"]), "pad_gemm/comprehensive:", pads, flush=True)
        torch.cuda.empty_cache()
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    if "OUT" in os.environ:
        with open(os.path.join(os.environ["OUT"], "unaligned_loss.json"), "w") as f:
            json.dump(out, f, indent=1)
    print(f"\n{out['device']}  median ms of {ITERS} calls x {rounds} rounds, {out['wall_s']} s")
    modes = ("inductor", "kernelpro", "kp-ce")
    print(f"{'case':<26}{'what':<9}" + "".join(f"{m:>11}" for m in modes))
    for name, case in out["cases"].items():
        for what in ("fwd", "fwd_bwd"):
            ms = case["median_ms"]
            row = "".join(f"{ms[m][what]:>11.3f}" if m in ms else f"{'-':>11}" for m in modes)
            print(f"{name:<26}{what:<9}{row}")
        for mode, log in case["compiles"].items():
            for kernel, us in log.get("kernels_us", []):
                print(f"  {name} {mode:<10} {us:9.1f} us  {kernel}")
    for name, (shape, vocab, form, _) in CASES.items():
        even = f"{shape}-{SHAPES[shape][2][1]}-{form}"
        if vocab == SHAPES[shape][2][0] and name in out["cases"] and even in out["cases"]:
            b = min(v["fwd_bwd"] for v in out["cases"][even]["median_ms"].values())
            for m, v in out["cases"][name]["median_ms"].items():
                print(f"{name} {m}: fwd_bwd {v['fwd_bwd']:.3f} ms = {v['fwd_bwd'] / b:.2f}x padded")


if __name__ == "__main__":
    main()
