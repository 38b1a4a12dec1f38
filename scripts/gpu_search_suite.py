"""GPU: search a suite of subgraphs with a fixed budget, through the real pipeline
(codegen -> isolated worker pool -> roofline findings -> MCTS with the rule proposer), and print
time vs eager vs Inductor and % of speed of light per subgraph.

    OUT=/tmp/out python3 scripts/gpu_search_suite.py [--trials 10] [--budget-s 45] [--only NAME]

Writes $OUT/search_suite.json and the search logs ($OUT/logs.tar.gz).
"""

from __future__ import annotations

import argparse
import json
import os
import tarfile
import time

import torch
import torch.nn.functional as F

from kernelpro_backend import examples, make_backend
from kernelpro_backend.autotune import SubgraphSearcher, load_artifact
from kernelpro_backend.options import Options


def subgraphs(fn, *inputs, train=False):
    found = []
    backend = make_backend(observer=lambda kind, sgs: found.extend(sgs))
    compiled = torch.compile(fn, backend=backend, options={"fallback": "eager", "search": "off"})
    if train:
        compiled(*inputs).float().square().mean().backward()
    else:
        with torch.no_grad():
            compiled(*inputs)
    return [s for s in found if not s.symbolic]


def suite():
    dev = "cuda"
    bf = torch.bfloat16
    cases = {}
    x = torch.randn(4096, 4096, device=dev, dtype=bf)
    lin = torch.nn.Linear(4096, 4096, device=dev, dtype=bf)
    cases["gemm_bias_gelu"] = subgraphs(lambda x: F.gelu(lin(x)), x)[0]
    a = torch.randn(4096, 512, device=dev, dtype=bf)
    w = torch.randn(256, 512, device=dev, dtype=bf)
    cases["gemm_logsumexp"] = subgraphs(lambda a: torch.logsumexp(a @ w.t(), -1), a)[0]
    r = torch.randn(8192, 4096, device=dev)
    ln = torch.nn.LayerNorm(4096, device=dev)
    cases["layer_norm"] = subgraphs(ln, r)[0]
    rms = examples.RMSNorm(4096).to(dev)
    cases["rms_norm"] = subgraphs(rms, r)[0]
    cases["softmax"] = subgraphs(lambda t: torch.softmax(t, -1), r)[0]
    logits = torch.randn(8192, 8192, device=dev)
    target = torch.randint(0, 8192, (8192,), device=dev)
    ce = subgraphs(lambda t: F.cross_entropy(t, target), logits)
    cases["cross_entropy"] = max(ce, key=lambda s: len(s.nodes))
    q, k, v = (torch.randn(8, 16, 2048, 64, device=dev, dtype=bf) for _ in range(3))
    att = subgraphs(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v
    )
    cases["attention_fwd"] = next(s for s in att if s.kind == "attention")
    model, (xb,) = examples.transformer_block(dev, batch=8, seq=512)
    bwd = [s for s in subgraphs(model, xb, train=True) if s.graph == "backward"]
    picked = [s for s in bwd if s.kind in ("reduction", "pointwise")][:3]
    picked += [s for s in bwd if s.kind == "gemm" and len(s.ops) > 1][:1]
    for i, s in enumerate(picked):
        cases[f"block_bwd_{i}_{s.pattern}"] = s
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=45)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--only", action="append")
    args = ap.parse_args()
    out_dir = os.environ.get("OUT", ".")
    cache_dir = os.path.join(out_dir, "cache")
    opts = Options.resolve(
        options={
            "max_trials": args.trials,
            "budget_s": args.budget_s,
            "workers": args.workers,
            "cache_dir": cache_dir,
            "progress": False,
        }
    )
    searcher = SubgraphSearcher(opts)
    rows, report = [], {"device": torch.cuda.get_device_name(), "cases": {}}
    started = time.time()
    for name, sg in suite().items():
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        try:
            artifact = searcher(sg)
        except Exception as e:  # a bug: record it and go on with the suite
            report["cases"][name] = {"error": repr(e)}
            rows.append((name, sg.pattern, "ERROR", repr(e)[:60]))
            continue
        log_path = os.path.join(cache_dir, "logs", f"{sg.key.digest[:16]}.jsonl")
        end: dict = {}
        start: dict = {}
        if os.path.exists(log_path):
            with open(log_path) as f:
                for line in f:
                    ev = json.loads(line)
                    if ev.get("event") == "end":
                        end = ev
                    if ev.get("event") == "start":
                        start = ev
        base = start.get("baselines", {})
        entry = {
            "pattern": sg.pattern,
            "kind": sg.kind,
            "graph": sg.graph,
            "inputs": [list(m[0]) + [m[2]] for m in sg.input_meta],
            "baselines_ms": base,
            "sol_ms": start.get("sol_ms"),
            "end": end,
            "seconds": time.time() - t0,
            "kernel_ms": artifact.kernel_ms if artifact else None,
            "sol_fraction": artifact.sol_fraction if artifact else None,
        }
        if artifact is not None:  # prove the cached form reloads and matches in this process
            kernel = load_artifact(artifact)
            inputs = sg.make_inputs(seed=123, device="cuda")
            ref = sg.module()(*inputs)
            got = kernel(*inputs)
            entry["reload_max_abs_err"] = max(
                (g.float() - r.float()).abs().max().item() for g, r in zip(got, ref, strict=True)
            )
        report["cases"][name] = entry
        eager, ind = base.get("eager"), base.get("inductor")
        best = end.get("best_ms")
        rows.append(
            (
                name,
                f"{eager or float('nan'):.4f}",
                f"{ind or float('nan'):.4f}",
                f"{best or float('nan'):.4f}",
                str(end.get("winner", "?"))[:10],
                f"{(artifact.sol_fraction or 0) * 100:.0f}%" if artifact else "-",
                f"{end.get('trials', '?')}/{end.get('trials_saved_by_sol', '?')}",
            )
        )
        print(name, rows[-1], flush=True)
    searcher.measurer.close()
    report["seconds"] = time.time() - started
    with open(os.path.join(out_dir, "search_suite.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    with tarfile.open(os.path.join(out_dir, "logs.tar.gz"), "w:gz") as tar:
        if os.path.isdir(os.path.join(cache_dir, "logs")):
            tar.add(os.path.join(cache_dir, "logs"), arcname="logs")
    print(f"\n{report['device']}  total {report['seconds']:.0f} s")
    header = ("case", "eager ms", "inductor ms", "best ms", "winner", "SOL", "trials/saved")
    print("  ".join(f"{h:<26}" if i == 0 else f"{h:>12}" for i, h in enumerate(header)))
    for r in rows:
        print("  ".join(f"{c:<26}" if i == 0 else f"{c:>12}" for i, c in enumerate(r)))


if __name__ == "__main__":
    main()
