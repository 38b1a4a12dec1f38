"""The child process that ncu profiles: load what to run, warm up, then run it once between
cudaProfilerStart and cudaProfilerStop (ncu runs with --profile-from-start off).

The payload is a pickled (fn, inputs) (`write_payload`, for a picklable callable). A search's
candidate has its own child, runtime/ncu_candidate.py, which rebuilds the kernel from its data
and profiles it with `profile_once`.

Owns: `write_payload`, `profile_once`, `cpu_copies` and the entry point
`python -m kernelpro_backend.profilers.ncu_launcher PAYLOAD`.
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
USAGE = "usage: python -m kernelpro_backend.profilers.ncu_launcher PAYLOAD"


def cpu_copies(inputs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs]


def write_payload(fn: Callable[..., Any], inputs: Sequence[Any], path: Path) -> Path:
    try:
        blob = pickle.dumps((fn, cpu_copies(inputs)))
    except Exception as exc:  # pickling arbitrary callables fails in many ways
        raise ValueError(
            f"cannot pickle {fn!r} for the ncu child process ({exc}); define it at module "
            "level or pass ProfileTarget.ncu_command"
        ) from exc
    path.write_bytes(blob)
    return path


def profile_once(fn: Callable[..., Any], inputs: Sequence[Any]) -> None:
    """Warm `fn` up, then run it once inside the profiled range."""
    import torch

    for _ in range(WARMUP_CALLS):
        fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def run_payload(path: str) -> None:
    import torch

    fn, cpu_inputs = pickle.loads(Path(path).read_bytes())
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in cpu_inputs]
    profile_once(fn, inputs)


def main(argv: Sequence[str]) -> None:
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.exit(USAGE)
    run_payload(argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
