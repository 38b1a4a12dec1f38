"""One rank of the distributed-search tests, run as a subprocess:
    python dist_rank.py RANK WORLD DIR SCENARIO
It joins a gloo group (file store in DIR), trains a small model for 3 steps with
torch.compile(backend=kernelpro's backend, eager fallback) whose provider is a DistributedFinder
over a KernelFinder with a fake searcher, and writes DIR/rank<R>.json: the keys it searched,
the kernel chosen per key, its losses and its cache's keys.
Scenarios: "ok"; "raise" (rank 1's searcher raises); "die" (rank 1 exits mid-search);
"shared" (one cache directory for all ranks); "plain" (no kernelpro: the reference losses)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))

from kernelpro_backend import make_backend  # noqa: E402
from kernelpro_backend.cache import KernelArtifact, KernelCache, cache_key  # noqa: E402
from kernelpro_backend.options import Options  # noqa: E402
from kernelpro_backend.rewrite.providers import CallableKernel  # noqa: E402
from kernelpro_backend.tuner import KernelFinder  # noqa: E402
from kernelpro_backend.tuner.distributed import DistributedFinder  # noqa: E402
from kernelpro_backend.tuner.exchange import Exchange  # noqa: E402


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x):
        h = torch.tanh(self.a(x)) * 2.0 + 1.0
        return torch.softmax(self.b(h).relu(), -1)


def _meet(out: Path, rank: int, world: int, timeout_s: float = 3.0) -> None:
    """Mark this rank's first search begun and wait (a few seconds at most: a round may have
    fewer keys than ranks) until every rank's has."""
    (out / f"began{rank}").touch()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all((out / f"began{r}").exists() for r in range(world)):
            return
        time.sleep(0.02)


def main(rank: int, world: int, out: Path, scenario: str) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=world
    )
    model = Model()
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    searched: list[str] = []
    modules: dict[str, torch.nn.Module] = {}  # canonical text -> the subgraph's reference

    def observe(kind, subgraphs):
        for sg in subgraphs:
            modules[sg.text] = sg.module()

    def searcher(sg):
        searched.append(cache_key(sg.key).digest)
        if scenario in ("ok", "raise", "die"):
            # Keys are claimed one at a time: no rank ends its first search before the other
            # ranks have begun one, so each holds a share on a loaded machine too (a rank whose
            # searches fail at once would otherwise claim them all; a rank slow to start would
            # find every key claimed: seen in CI for "die", rank 1 then searched nothing).
            _meet(out, rank, world)
        if scenario == "ok":
            time.sleep(0.5)  # a search takes time: the other ranks claim keys meanwhile
        if scenario == "raise" and rank == 1:
            raise RuntimeError("candidate blew up")
        if scenario == "die" and rank == 1:
            os._exit(7)
        if sg.kind == "reduction":
            return None  # nothing beats the fallback here
        return KernelArtifact(
            language="python", source=f"# found by rank {rank}", entry="ref",
            kernel_ms=0.001, baselines_ms={"eager": 1.0},
        )  # fmt: skip

    def loader(artifact):
        return CallableKernel(f"ref-{artifact.source[-1]}", modules[artifact.subgraph_text])

    cache_dir = out / ("cache" if scenario == "shared" else f"cache{rank}")
    options = Options(search="on-miss", fallback="eager", cache_dir=str(cache_dir))
    inner = KernelFinder(KernelCache(cache_dir), options, loader, searcher)
    provider = DistributedFinder(inner, Exchange(timeout_s=20), admit=lambda artifact: None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fn = model
    if scenario != "plain":
        fn = torch.compile(
            model,
            backend=make_backend(provider=provider, observer=observe),
            options={"fallback": "eager"},
        )
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = fn(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    decided = {d: (None if a is None else a.source) for d, a in sorted(provider.decided.items())}
    with KernelCache(cache_dir) as cache:
        stored = sorted(e.key.digest for e in cache.entries())
    report = {"searched": searched, "decided": decided, "losses": losses, "stored": stored}
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
