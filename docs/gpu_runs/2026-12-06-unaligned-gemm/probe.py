"""Probe: an LM head whose vocabulary breaks 16-byte alignment (50257, 32001) against the same
head padded (50264, 32008), in eager, Inductor and kernelpro (search on-miss, small budget,
fresh cache dir in /tmp): forward alone and forward + backward, bf16 autocast over float32
weights as users train, the backward's dY a contiguous [tokens, vocab] gradient (as a loss's
backward writes it). Interleaved rounds, CUDA events. Says which candidate won each kernelpro
GEMM search (template, and the gemm_padded note: what was padded and copied).

Done-when of issue 57 item 3: kernelpro at 50257 within 10% of the padded shape's time.

    OUT=/tmp/out python docs/gpu_runs/2026-12-06-unaligned-gemm/probe.py

Env: PROBE_BUDGET_S (search budget per subgraph, default 8), PROBE_ROUNDS (default 5),
PROBE_CASES (comma list of names below, default all). Writes $OUT/unaligned_gemm.json.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time

import torch

from kernelpro_backend import make_backend

# name: (tokens, hidden, vocabulary)
CASES = {
    "gpt2-50257": (8192, 768, 50257),
    "gpt2-50264": (8192, 768, 50264),
    "llama-32001": (4096, 4096, 32001),
    "llama-32008": (4096, 4096, 32008),
}
MODES = ("eager", "inductor", "kernelpro")
ITERS = 10


class Head(torch.nn.Module):
    def __init__(self, hidden: int, vocab: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.proj(x)


def compiled(model: torch.nn.Module, mode: str, cache: str, budget: float):
    if mode == "eager":
        return model
    if mode == "inductor":
        return torch.compile(model, dynamic=False)
    options = {
        "search": "on-miss",
        "budget_s": budget,
        "max_trials": 12,
        "cache_dir": cache,
        "search_patterns": ("mm", "mm+epilogue"),  # the GEMMs; the weight's cast stays Inductor's
        "progress": False,
    }
    return torch.compile(model, backend=make_backend(), options=options, dynamic=False)


def time_ms(fn, iters: int = ITERS) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def winners(new_logs: list[str]) -> list[dict]:
    """Each search's pattern, winner (template and note) and times, from its log."""
    out = []
    for path in sorted(new_logs):
        with open(path) as f:
            events = [json.loads(line) for line in f]
        start = next((e for e in events if e.get("event") == "start"), {})
        end = next((e for e in events if e.get("event") == "end"), {})
        won = next((e for e in events if e.get("id") == end.get("winner")), None)
        trials = [e for e in events if e.get("event") == "trial"]
        padded = [e for e in trials if e["candidate"].get("template") == "gemm_padded"]
        out.append({
            "pattern": start.get("pattern"),
            "baselines_ms": start.get("baselines"),
            "best_ms": end.get("best_ms"),
            "winner": None if won is None else won["candidate"].get("template"),
            "note": None if won is None else won["candidate"].get("note"),
            "padded_ms": [e.get("median_ms") for e in padded],
            "padded_note": padded[0]["candidate"].get("note") if padded else None,
            "trials": len(trials),
        })  # fmt: skip
    return out


def run_case(name: str, rounds: int, budget: float, cache: str) -> dict:
    tokens, hidden, vocab = CASES[name]
    torch.manual_seed(0)
    model = Head(hidden, vocab).cuda()
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16)
    before = set(glob.glob(os.path.join(cache, "**", "*.jsonl"), recursive=True))
    fns, compile_s = {}, {}
    for mode in MODES:
        t0 = time.perf_counter()
        fn = compiled(model, mode, cache, budget)
        fn(x).backward(g)  # compiles forward and backward (kernelpro: searches them)
        torch.cuda.synchronize()
        compile_s[mode] = round(time.perf_counter() - t0, 1)
        fns[mode] = fn

    def fwd(fn):
        return lambda: fn(x)

    def step(fn):
        def run() -> None:
            x.grad = None
            model.proj.weight.grad = None
            fn(x).backward(g)

        return run

    times: dict[str, dict[str, list[float]]] = {m: {"fwd": [], "fwd_bwd": []} for m in MODES}
    for mode in MODES:  # warm each once more before the rounds
        time_ms(fwd(fns[mode]), 2), time_ms(step(fns[mode]), 2)
    for _ in range(rounds):
        for mode in MODES:
            times[mode]["fwd"].append(time_ms(fwd(fns[mode])))
            times[mode]["fwd_bwd"].append(time_ms(step(fns[mode])))
    after = set(glob.glob(os.path.join(cache, "**", "*.jsonl"), recursive=True))
    logs = [p for p in after - before if os.sep + "logs" + os.sep in p]
    med = {m: {k: sorted(v)[len(v) // 2] for k, v in t.items()} for m, t in times.items()}
    return {"shape": [tokens, hidden, vocab], "median_ms": med, "rounds_ms": times,
            "compile_s": compile_s, "searches": winners(logs)}  # fmt: skip


def main() -> None:
    budget = float(os.environ.get("PROBE_BUDGET_S", "8"))
    rounds = int(os.environ.get("PROBE_ROUNDS", "5"))
    names = [n for n in os.environ.get("PROBE_CASES", ",".join(CASES)).split(",") if n]
    cache = tempfile.mkdtemp(prefix="kp-unaligned-")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "budget_s": budget, "cache_dir": cache, "cases": {}}  # fmt: skip
    for name in names:
        out["cases"][name] = run_case(name, rounds, budget, cache)
        print(name, json.dumps(out["cases"][name]["median_ms"]), flush=True)
        for s in out["cases"][name]["searches"]:
            print("   search", json.dumps(s), flush=True)
        torch.cuda.empty_cache()
    if "OUT" in os.environ:
        with open(os.path.join(os.environ["OUT"], "unaligned_gemm.json"), "w") as f:
            json.dump(out, f, indent=1)
    print(f"\n{out['device']}  median ms of {ITERS} calls x {rounds} interleaved rounds")
    print(f"{'case':<13}{'what':<9}" + "".join(f"{m:>11}" for m in MODES))
    for name, case in out["cases"].items():
        for what in ("fwd", "fwd_bwd"):
            row = "".join(f"{case['median_ms'][m][what]:>11.3f}" for m in MODES)
            print(f"{name:<13}{what:<9}{row}")
    for odd, even in (("gpt2-50257", "gpt2-50264"), ("llama-32001", "llama-32008")):
        if odd in out["cases"] and even in out["cases"]:
            for what in ("fwd", "fwd_bwd"):
                a = out["cases"][odd]["median_ms"]["kernelpro"][what]
                b = min(out["cases"][even]["median_ms"][m][what] for m in MODES)
                print(f"{odd} {what}: kernelpro {a:.3f} ms = {a / b:.2f}x the padded shape's best")


if __name__ == "__main__":
    main()
