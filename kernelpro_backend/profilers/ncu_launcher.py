"""The child process that ncu profiles: load a pickled (fn, inputs), warm up, then run fn once
between cudaProfilerStart and cudaProfilerStop (ncu runs with --profile-from-start off).

Owns: `write_payload` and the `python -m kernelpro_backend.profilers.ncu_launcher PAYLOAD`
entry point.
Must not: profile anything itself; warm-up launches (Triton compilation, autotuning) stay
outside the profiled range.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

WARMUP_CALLS = 2


def write_payload(fn: Callable[..., Any], inputs: Sequence[Any], path: Path) -> Path:
    import torch

    cpu_inputs = [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs]
    try:
        blob = pickle.dumps((fn, cpu_inputs))
    except Exception as exc:  # pickling arbitrary callables fails in many ways
        raise ValueError(
            f"cannot pickle {fn!r} for the ncu child process ({exc}); define it at module "
            "level or pass ProfileTarget.ncu_command"
        ) from exc
    path.write_bytes(blob)
    return path


def run_payload(path: str) -> None:
    import torch

    fn, cpu_inputs = pickle.loads(Path(path).read_bytes())
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in cpu_inputs]
    for _ in range(WARMUP_CALLS):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m kernelpro_backend.profilers.ncu_launcher PAYLOAD")
    run_payload(sys.argv[1])
