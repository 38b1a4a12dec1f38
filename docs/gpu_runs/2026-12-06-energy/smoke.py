"""The energy probe's stand-ins for the smoke run on the CPU (probe.py --smoke): an energy
meter at a steady 300 W, a measurer whose figures come from a hash of each candidate, and a
searcher that runs the real search over them. Their figures mean nothing; they check the
probe's logic end to end."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from kernelpro_backend.options import Options
from kernelpro_backend.paths import CacheLayout
from kernelpro_backend.runtime.result import EvalResult, EvalStatus
from kernelpro_backend.search import Budget, codegen_space, optimize
from kernelpro_backend.tuner.searcher import outcome_artifact


class FakeMeter:
    """The smoke's energy meter: a counter at a steady 300 W, stepping every ~20 ms as NVML's."""

    def energy_mj(self) -> int:
        return int(time.perf_counter() * 50) * 6000  # 300 W: 6 J every 20 ms

    def power_w(self) -> float:
        return 60.0

    def limits_w(self) -> tuple[float, float]:
        return 700.0, 700.0


class FakeMeasurer:
    """The smoke's measurer: each candidate's ms and joules from a hash of its description (a
    spread of 0.5-0.6 ms and 0.5-1.0 J, so the two rules can differ); Inductor 1 ms, eager 2."""

    def __init__(self, space: Any) -> None:
        self.space = space

    def measure(self, subgraph: Any, candidates: Any) -> list[EvalResult]:
        out = []
        for c in candidates:
            h = hashlib.sha256(json.dumps(self.space.describe(c), default=str).encode()).digest()
            ms, j = 0.5 + h[0] / 2550, 0.5 + h[1] / 510
            out.append(EvalResult(EvalStatus.OK, median_ms=ms, spread_ms=1e-4, energy_j=j))
        return out

    def baselines(self, subgraph: Any) -> dict[str, EvalResult]:
        return {name: EvalResult(EvalStatus.OK, median_ms=ms, spread_ms=1e-3, energy_j=ms)
                for name, ms in (("eager", 2.0), ("inductor", 1.0))}  # fmt: skip


class FakeSearcher:
    """The smoke's SubgraphSearcher: optimize() over the real codegen space, FakeMeasurer."""

    def __init__(self, options: Options) -> None:
        self.options, self.layout = options, CacheLayout.of(options.cache_dir)
        self.outcome: Any = None
        self.skipped: str | None = None

    def __call__(self, sg: Any) -> Any:
        if self.options.search_patterns and sg.pattern not in self.options.search_patterns:
            self.outcome, self.skipped = None, "not in search_patterns"
            return None
        space: Any = codegen_space()
        self.layout.logs.mkdir(parents=True, exist_ok=True)
        self.outcome = optimize(sg, space=space, measurer=FakeMeasurer(space),
                                budget=Budget(self.options.max_trials, 1e9, None, None),
                                objective="energy", log_path=log_path(self, sg),
                                progress=False)  # fmt: skip
        return outcome_artifact(self.outcome, sg, log_path(self, sg), self.layout.cubin_root,
                                self.options)  # fmt: skip


def log_path(searcher: Any, sg: Any) -> str:
    return str(searcher.layout.logs / f"{sg.key.digest[:16]}.jsonl")  # as SubgraphSearcher's
