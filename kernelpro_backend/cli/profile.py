"""`kernelpro profile MODULE:FN`: the two-stage profile of every subgraph of a model, as text.

Owns: the `profile` arguments (`add_cli`, `run_cli`), loading the model onto the GPU and
printing each subgraph's report (`profile_model`).
Must not: search or replace kernels (it profiles the reference, eager aten, of each subgraph),
or measure anything itself (profilers/ does).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from typing import Any

from ..profilers.roofline import DEFAULT_BYTES_PER_S, DEFAULT_FLOPS_PER_S, Roofs


def add_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profile",
        help="profile each fusable subgraph of a model: roofline class, then micro-profiling findings",
        description="MODULE:FN names a function returning (model, example_inputs). Needs a CUDA GPU.",
    )
    p.add_argument("target", metavar="MODULE:FN")
    p.add_argument(
        "--tools", help="comma-separated tool names (default: those the class calls for)"
    )
    p.add_argument("--bandwidth", type=float, default=DEFAULT_BYTES_PER_S, help="bytes/s roof")
    p.add_argument("--flops", type=float, help="FLOP/s roof (default: by dtype, H100)")
    p.add_argument("--limit", type=int, default=0, help="profile at most N subgraphs (0: all)")
    p.add_argument(
        "--start", type=int, default=0,
        help="begin at subgraph N as the output numbers them (resume a profile cut short)",
    )  # fmt: skip
    p.set_defaults(func=run_cli)


def _load(spec: str) -> tuple[Any, tuple[Any, ...]]:
    module_name, _, fn_name = spec.partition(":")
    if not fn_name:
        raise SystemExit(f"kernelpro profile: expected MODULE:FN, got {spec!r}")
    factory = getattr(importlib.import_module(module_name), fn_name)
    takes_device = "device" in inspect.signature(factory).parameters
    model, inputs = factory(device="cuda") if takes_device else factory()
    inputs = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    return model.cuda(), tuple(x.cuda() if hasattr(x, "cuda") else x for x in inputs)


def profile_model(
    spec: str,
    tools: list[str] | None,
    bandwidth: float,
    flops_roof: float | None,
    limit: int,
    start: int = 0,
) -> int:
    import torch

    from ..explain import find_subgraphs
    from ..profilers.api import profile_kernel
    from ..profilers.speed_of_light import subgraph_cost

    model, inputs = _load(spec)
    # forward and, when the output requires grad, backward: its subgraphs count too
    found = [sg for sg in find_subgraphs(model, *inputs) if not sg.symbolic]
    torch.cuda.synchronize()
    chosen = list(enumerate(found))[start:]
    for i, sg in chosen[: limit or None]:
        ref, sg_inputs = sg.module(), sg.make_inputs(0, "cuda")
        flops, nbytes = subgraph_cost(ref, sg_inputs)
        dtype = sg.input_meta[0][2] if sg.input_meta else "float32"
        roof = flops_roof or DEFAULT_FLOPS_PER_S.get(dtype, DEFAULT_FLOPS_PER_S["float32"])
        ceilings = Roofs(
            bytes_per_s=bandwidth,
            flops_per_s=roof,
            sm_count=torch.cuda.get_device_properties(0).multi_processor_count,
        )
        print(
            f"\n[{i}] {sg.graph} {sg.kind} {sg.pattern} ({sg.key.digest[:12]}): {flops:.3g} FLOP, {nbytes:.3g} B"
        )
        report = profile_kernel(
            ref, sg_inputs, flops=flops, bytes=nbytes, ceilings=ceilings, tools=tools
        )
        print(report.text())
    profiled = len(chosen[: limit or None])
    print(
        f"\n{len(found)} subgraphs found"
        + (f", {profiled} profiled (from [{start}])" if profiled < len(found) else "")
    )
    return 0


def run_cli(args: argparse.Namespace) -> int:
    import torch

    if not torch.cuda.is_available():
        print(
            "kernelpro profile: profiling needs a CUDA GPU and none is visible here "
            "(torch.cuda.is_available() is False); run it on the GPU machine.",
            file=sys.stderr,
        )
        return 2
    tools = [t.strip() for t in args.tools.split(",")] if args.tools else None
    return profile_model(args.target, tools, args.bandwidth, args.flops, args.limit, args.start)
