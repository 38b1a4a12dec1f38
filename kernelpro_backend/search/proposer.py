"""The proposer protocol: given a measured candidate and its findings, propose children.

Owns: `Proposal`, `ProposalRequest` (everything a proposer may look at: the subgraph, the node's
candidate and measurement with its typed findings, the space, the history of the search, the
memory prior of moves, and a duplicate check) and `Proposer`. The built-in `RuleProposer` lives
in rules.py; `LLMProposer` in llm/ reads `findings` and `history` too, and returns knob changes
("llm:knobs:...") and free-form candidates ("llm:rewrite:triton"). A proposer may also have a
`stats()` method returning counters (requests, tokens, ...); optimize logs what a search adds.
Must not: measure candidates or parse profiler output (findings arrive typed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from ..profilers.findings import Bottleneck, Finding
from ..runtime.result import EvalResult
from .space import SearchSpace


@dataclasses.dataclass(frozen=True)
class Proposal:
    candidate: Hashable
    move: str  # what changed, subgraph-independent: "vector_width:up", "num_stages:down+..."
    reason: str  # why: "finding:ptxas/spill_bytes", "roofline:memory-bound", "neighbour"
    score: float = 0.0  # the proposer's preference; the tree expands higher scores first


@dataclasses.dataclass(frozen=True)
class ProposalRequest:
    subgraph: Any
    candidate: Hashable
    result: EvalResult
    space: SearchSpace
    # One dict per measured node so far: {"id", "parent", "move", "candidate", "status",
    # "median_ms", "reward", "message"}; what an LLM proposer shows as "tried so far".
    history: tuple[dict[str, Any], ...]
    move_prior: Callable[[str], float]  # memory's expected gain of a move on this subgraph
    is_known: Callable[[Hashable], bool]  # already in the tree (proposing it again is wasted)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.result.findings

    @property
    def bottleneck(self) -> Bottleneck | None:
        return bottleneck_of(self.result.findings)


class Proposer(Protocol):
    name: str

    def propose(self, request: ProposalRequest) -> list[Proposal]:
        """Children of `request.candidate`, best first. Returning [] closes the node."""
        ...


def bottleneck_of(findings: tuple[Finding, ...]) -> Bottleneck | None:
    """The stage-1 class from the roofline finding (tool "roofline", metric "bottleneck")."""
    for f in findings:
        if f.tool == "roofline" and f.metric == "bottleneck":
            try:
                return Bottleneck(f.value)
            except ValueError:
                return None
    return None
