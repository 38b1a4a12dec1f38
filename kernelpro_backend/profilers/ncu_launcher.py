"""The child process that ncu profiles: load what to run, warm up, then run it once between
cudaProfilerStart and cudaProfilerStop (ncu runs with --profile-from-start off).

Two payloads: a pickled (fn, inputs) (`write_payload`, for a picklable callable), and a pickled
candidate with its inputs (`write_candidate_payload`, for a search's candidate: a compiled kernel
does not pickle, so the child rebuilds it from the candidate's data with runtime's
`load_kernel`, as the worker did).

Owns: `write_payload`, `write_candidate_payload` and the entry points
`python -m kernelpro_backend.profilers.ncu_launcher PAYLOAD` and
`python -m kernelpro_backend.profilers.ncu_launcher --candidate PAYLOAD`.
Must not: profile anything itself; warm-up launches (Triton compilation, autotuning, a CUDA
candidate's module load) stay outside the profiled range.
"""

from __future__ import annotations

import pickle
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

WARMUP_CALLS = 2
USAGE = (
    "usage: python -m kernelpro_backend.profilers.ncu_launcher PAYLOAD\n"
    "       python -m kernelpro_backend.profilers.ncu_launcher --candidate PAYLOAD"
)


def _cpu(inputs: Sequence[Any]) -> list[Any]:
    import torch

    return [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs]


def write_payload(fn: Callable[..., Any], inputs: Sequence[Any], path: Path) -> Path:
    try:
        blob = pickle.dumps((fn, _cpu(inputs)))
    except Exception as exc:  # pickling arbitrary callables fails in many ways
        raise ValueError(
            f"cannot pickle {fn!r} for the ncu child process ({exc}); define it at module "
            "level or pass ProfileTarget.ncu_command"
        ) from exc
    path.write_bytes(blob)
    return path


def write_candidate_payload(
    candidate: Any, inputs: Sequence[Any], path: Path, *, precision: str = "ieee", device: str = ""
) -> Path:
    """A runtime Candidate (plain frozen data) and CPU copies of its inputs, for `--candidate`.
    `device`: where the child runs it ("" : the current CUDA device)."""
    import torch

    if not device:
        device = next((str(x.device) for x in inputs if isinstance(x, torch.Tensor)), "cuda")
    payload = {
        "candidate": candidate,
        "inputs": _cpu(inputs),
        "precision": precision,
        "device": device,
    }
    path.write_bytes(pickle.dumps(payload))
    return path


def _profile(fn: Callable[..., Any], inputs: Sequence[Any]) -> None:
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
    _profile(fn, inputs)


def run_candidate_payload(path: str) -> None:
    import torch

    from ..runtime.candidate import load_kernel
    from ..runtime.validate import precision_mode

    payload = pickle.loads(Path(path).read_bytes())
    device = torch.device(payload["device"])
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in payload["inputs"]]
    workdir = Path(tempfile.mkdtemp(prefix="kernelpro-ncu-"))
    with precision_mode(payload["precision"]):
        fn = load_kernel(payload["candidate"], torch.nn.Identity(), workdir)
        _profile(fn, inputs)


def main(argv: Sequence[str]) -> None:
    if len(argv) == 1 and not argv[0].startswith("-"):
        run_payload(argv[0])
    elif len(argv) == 2 and argv[0] == "--candidate":
        run_candidate_payload(argv[1])
    else:
        sys.exit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
