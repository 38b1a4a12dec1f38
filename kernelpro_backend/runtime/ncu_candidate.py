"""The child process ncu profiles for a search's candidate: a compiled kernel does not pickle, so
the child rebuilds it from the candidate's data with `load_kernel`, as the worker did, warms it
up and runs it once between cudaProfilerStart and cudaProfilerStop (profilers/ncu_launcher.py's
`profile_once`).

Owns: `write_candidate_payload` and the entry point
`python -m kernelpro_backend.runtime.ncu_candidate PAYLOAD`.
Must not: profile anything itself; the candidate's module load and warm-up launches stay
outside the profiled range.
"""

from __future__ import annotations

import pickle
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..profilers.ncu_launcher import cpu_copies, profile_once

USAGE = "usage: python -m kernelpro_backend.runtime.ncu_candidate PAYLOAD"


def write_candidate_payload(
    candidate: Any,
    inputs: Sequence[Any],
    path: Path,
    *,
    precision: str = "ieee",
    device: str = "",
    cubin_dir: Path | None = None,
) -> Path:
    """A runtime Candidate (plain frozen data) and CPU copies of its inputs.
    `device`: where the child runs it ("" : the device of the first tensor input, else cuda);
    `cubin_dir`: the worker's cubin cache, so the child finds the cubin it compiled."""
    import torch

    if not device:
        device = next((str(x.device) for x in inputs if isinstance(x, torch.Tensor)), "cuda")
    payload = {
        "candidate": candidate,
        "inputs": cpu_copies(inputs),
        "precision": precision,
        "device": device,
        "cubin_dir": cubin_dir,
    }
    path.write_bytes(pickle.dumps(payload))
    return path


def run_candidate_payload(path: str) -> None:
    import torch

    from .candidate import load_kernel
    from .precision import precision_mode

    payload = pickle.loads(Path(path).read_bytes())
    device = torch.device(payload["device"])
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in payload["inputs"]]
    workdir = Path(tempfile.mkdtemp(prefix="kernelpro-ncu-"))
    with precision_mode(payload["precision"]):
        fn = load_kernel(
            payload["candidate"], torch.nn.Identity(), workdir, cubin_dir=payload.get("cubin_dir")
        )
        profile_once(fn, inputs)


def main(argv: Sequence[str]) -> None:
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.exit(USAGE)
    run_candidate_payload(argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
