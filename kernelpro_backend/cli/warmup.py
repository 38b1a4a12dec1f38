"""`kernelpro warmup MODULE:FN`: search every subgraph of a model that the cache lacks.

Owns: the `warmup` arguments, turning them into warmup options, the printout, and running as
one rank of several: under `torchrun --nproc-per-node N -m kernelpro_backend.cli warmup ...`
(or `--nproc N`, which starts torchrun's elastic agent itself) each rank joins the process
group, takes its GPU (LOCAL_RANK) and searches its share of the misses (tuner/distributed.py);
rank 0 prints the summary.
Must not: search or cache by itself (warmup.py does).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from ..warmup.offline import DEFAULT_DEADLINE_S
from .target import model_inputs_and_shapes, model_inputs_over

log = logging.getLogger("kernelpro.warmup")


def add_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "warmup",
        help="search every subgraph of a model that the cache lacks (resumable)",
        description="MODULE:FN returns (model, example_inputs), or (model, example_inputs, "
        "[example_inputs at another shape, ...]) to warm up several shapes (each compiled "
        "with static sizes). Searches forward and backward subgraphs on this GPU and stores "
        "each winner as soon as it is found.",
    )
    p.add_argument("target", metavar="MODULE:FN")
    p.add_argument("--budget-s", type=float, default=None, help="search seconds per subgraph")
    p.add_argument("--max-trials", type=int, default=None, help="search trials per subgraph")
    p.add_argument("--no-train", action="store_true", help="inference graph only (no backward)")
    p.add_argument(
        "--no-context-check",
        action="store_true",
        help="do not time the training step with and without the kernels found (by default "
        "kernels that make it slower are recorded and left unused)",
    )
    p.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help=f"the whole warm-up's seconds (default {DEFAULT_DEADLINE_S:.0f}, so that a model "
        "of the bench's corpus is warmed within 10 minutes; 0: none): searching stops early "
        "enough for the in-context check to run (it compiles and times the step 2 to 6 times, "
        "more to find which of many kernels lose); the subgraphs not reached are listed, the "
        "kernels not judged stay unused, and the next warm-up resumes with the next best",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON object (keys stable; new keys may be added): "
        "seconds, phases {collect, search, cutlass, compile, check: seconds}, plan {distinct, "
        "occurrences, planned, searched, found, skipped, not_reached, below_floor, cached, "
        "searched_before, not_selected, floor_us, basis, not_reached_items}, rows, context",
    )
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="judge the kernels found on the step replayed as CUDA graphs, as training with "
        "options={'cuda_graphs': True} or mode='reduce-overhead' runs it",
    )
    p.add_argument(
        "--patterns",
        default=None,
        help="search only these subgraph patterns, comma-separated (as `explain` names them, "
        "e.g. sdpa_backward,rms_norm); default: all",
    )
    p.add_argument(
        "--dynamic",
        action="append",
        default=[],
        metavar="DIM=LOW:HIGH",
        help="warm the sizes of a dimension that varies: FN is called as FN(DIM=size) for LOW, "
        "each power of two between, and HIGH (DIM=A,B,C: the sizes listed); repeatable "
        "(every combination). Each size is warmed static and through the symbolic graph "
        "torch.compile makes after a shape change",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=None,
        help="split the search over N ranks on this machine (one per GPU; launches torchrun)",
    )
    p.set_defaults(func=run_warmup)


def run_warmup(args: argparse.Namespace) -> int:
    if args.nproc and args.nproc > 1 and "LOCAL_RANK" not in os.environ:
        return _launch(args.nproc)
    from ..warmup.offline import search_provider, warmup, warmup_options

    rank = _join_process_group()
    log.info("rank %d in its process group, pool starting", rank)
    options: dict[str, Any] = {}
    if args.cache_dir:
        options["cache_dir"] = args.cache_dir
    if args.max_trials:
        options["max_trials"] = args.max_trials
    if args.patterns:
        options["search_patterns"] = args.patterns
    if args.cuda_graphs:
        options["cuda_graphs"] = True
    try:
        # the search's workers boot while the target is imported and the model built
        provider = search_provider(warmup_options(options, args.budget_s))
    except RuntimeError as e:
        print(f"kernelpro warmup: {e}", file=sys.stderr)
        return 2
    if args.dynamic:
        model, inputs, more = model_inputs_over(args.target, args.dynamic)
    else:
        model, inputs, more = model_inputs_and_shapes(args.target)
    log.info("rank %d built %s", rank, args.target)
    try:
        report = warmup(
            model, inputs, train=not args.no_train, budget_s=args.budget_s, options=options,
            provider=provider, more_inputs=more, check_context=not args.no_context_check,
            deadline_s=_deadline(args.deadline_s),
        )  # fmt: skip
    except RuntimeError as e:
        print(f"kernelpro warmup: {e}", file=sys.stderr)
        return 2
    if rank == 0:
        print(json.dumps(report.to_dict(), indent=1) if args.json else report.table())
    log.info("rank %d done", rank)
    return 0


def _deadline(given: float | None) -> float | None:
    """The warm-up's deadline: DEFAULT_DEADLINE_S unless given; 0 or less: none."""
    if given is None:
        return DEFAULT_DEADLINE_S
    return given if given > 0 else None


def _launch(nproc: int) -> int:
    """Run this same command under torchrun's elastic agent, `nproc` ranks on this machine."""
    from torch.distributed.run import main as torchrun

    argv, rest = sys.argv[1:], []
    skip = False
    for arg in argv:
        if skip or arg.startswith("--nproc="):
            skip = False
            continue
        if arg == "--nproc":
            skip = True
            continue
        rest.append(arg)
    log.info("starting %d ranks under torchrun", nproc)
    torchrun(["--nproc-per-node", str(nproc), "-m", "kernelpro_backend.cli", *rest])
    log.info("all ranks exited")
    return 0


def _join_process_group() -> int:
    """Under torchrun (WORLD_SIZE > 1): join the group (gloo; the exchange is small), take
    this rank's GPU; returns the rank (0 alone)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return dist.get_rank()
