"""Which subgraphs of KernelBench-format problems lower to a template, and (with --check)
whether each lowered kernel matches its reference under Triton's interpreter. CPU only: the
problems' module-level sizes above 64 are scaled down (v // 64, between 16 and 96) so the
interpreter finishes; the structure of each graph is what is checked, not its speed.

    PYTHONPATH=.:tests/codegen:tests TRITON_INTERPRET=1 python scripts/kernelbench_lowering.py \\
        --problems ../shared/kernelbench [--train] [--check] [--skip L3_20 --skip L1_63]
    --set L3_50_ReLUSelfAttention:batch_size=2,max_seqlen=64,n_embd=96,n_head=12
"""

from __future__ import annotations

import argparse
import collections
import pathlib

import torch
from harness import check, collect

from kernelpro_backend.bench.problems import load_problem_module, problem_files
from kernelpro_backend.lowering import lower


def _load(path: pathlib.Path, fixed: dict[str, int]):
    module = load_problem_module(path)
    for name, value in list(vars(module).items()):
        if isinstance(value, int) and not isinstance(value, bool) and value > 64:
            setattr(module, name, max(16, min(value // 64, 96)))
    for name, value in fixed.items():
        setattr(module, name, value)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", required=True)
    p.add_argument("--train", action="store_true", help="forward and backward graphs")
    p.add_argument("--check", action="store_true", help="run each kernel against its reference")
    p.add_argument("--skip", action="append", default=[], help="file-name prefixes to skip")
    p.add_argument("--set", action="append", default=[], help="STEM:name=value,... sizes")
    a = p.parse_args()
    fixed: dict[str, dict[str, int]] = {}
    for item in a.set:
        stem, _, pairs = item.partition(":")
        fixed[stem] = {k: int(v) for k, v in (kv.split("=") for kv in pairs.split(","))}
    reasons: collections.Counter[str] = collections.Counter()
    for path in problem_files(a.problems):
        if path.stem.startswith(tuple(a.skip)):
            continue
        torch.manual_seed(0)
        try:
            module = _load(path, fixed.get(path.stem, {}))
            model, inputs = module.Model(*module.get_init_inputs()), module.get_inputs()
            if a.train:
                inputs = [
                    x.requires_grad_() if torch.is_tensor(x) and x.is_floating_point() else x
                    for x in inputs
                ]
            torch._dynamo.reset()
            subgraphs = collect(model, inputs, train=a.train)
        except Exception as e:
            print(f"{path.stem:55s} not traced: {type(e).__name__}: {str(e)[:100]}")
            continue
        failed = []
        for sg in subgraphs:
            try:
                spec = lower(sg)
                if a.check:
                    check(sg, spec)
            except Exception as e:
                why = str(e).split("\n")[0][:110]
                failed.append(f"{sg.graph} {sg.pattern}: {why}")
                reasons[why[:70]] += 1
        print(f"{path.stem:55s} {len(subgraphs):4d} subgraphs, {len(failed)} not lowered/matching")
        for f in failed[:3]:
            print(f"    {f}")
    print("\nreasons:")
    for why, count in reasons.most_common():
        print(f"  {count:4d}  {why}")


if __name__ == "__main__":
    main()
