"""Probe: does the warm-up collect a channels-last model's step at the keys its compiles look up?

The warm-up collects the step's subgraphs (warmup/offline._step_subgraphs: eager first, again
through Inductor where Inductor lays the forward channels-last), then a compile of the step
looks each subgraph up by key. Here both run on one model, nothing searched, and the keys are
compared per graph; the backward's 4-D activations laid NHWC are counted.

    KP_MODEL=tv_resnet50 OUT=/tmp/out python docs/gpu_runs/2026-12-07-backward-strides-h100/keys_probe.py

Env: KP_DEVICE (cuda), KP_SIZE (full). Writes $OUT/keys.json; prints a table last.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from kernelpro_backend.backend import make_backend  # noqa: E402
from kernelpro_backend.bench.workloads import WORKLOADS  # noqa: E402
from kernelpro_backend.warmup.offline import _step, _step_subgraphs  # noqa: E402

MODEL = os.environ.get("KP_MODEL", "tv_resnet50")
OUT = Path(os.environ.get("OUT", "out"))


def nhwc(meta) -> bool:
    shape, stride, _ = meta
    if len(shape) != 4 or shape[1] == 1 or shape[2] * shape[3] == 1:
        return False
    return tuple(stride) == tuple(torch._prims_common.make_channels_last_strides_for(shape))


def main() -> None:
    device = torch.device(os.environ.get("KP_DEVICE", "cuda"))
    workload = WORKLOADS[MODEL](device, None, os.environ.get("KP_SIZE", "full"))
    model, inputs, loss = workload.fresh_model(), list(workload.inputs), workload.loss_fn
    opts = {"search": "off"}
    t0 = time.perf_counter()
    collected = _step_subgraphs(model, opts, True, loss, inputs, None)
    collect_s = time.perf_counter() - t0
    keys = {(sg.graph, sg.key.digest) for sg in collected}
    looked: set = set()
    metas: list = []

    def observe(kind, sgs):
        for sg in sgs:
            if not sg.symbolic:
                looked.add((kind, sg.key.digest))
                if kind == "backward":
                    metas.extend(sg.input_meta)

    t0 = time.perf_counter()
    _step(model, make_backend(observer=observe), opts, True, loss, inputs, None)
    compile_s = time.perf_counter() - t0
    row = {
        "model": MODEL,
        "collect_s": round(collect_s, 1),
        "compile_s": round(compile_s, 1),
        "collected": len(keys),
        "looked_up": len(looked),
        "missed": sorted(f"{g}/{d[:12]}" for g, d in looked - keys),
        "backward_inputs_nhwc": sum(nhwc(m) for m in metas),
        "backward_inputs_4d": sum(len(m[0]) == 4 for m in metas),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "keys.json").write_text(json.dumps(row, indent=1))
    print(json.dumps({k: v for k, v in row.items() if k != "missed"}))
    print("missed:", row["missed"][:20])


if __name__ == "__main__":
    main()
