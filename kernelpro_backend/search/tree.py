"""The Monte Carlo search tree over candidates, driven by ask/tell.

Owns: `SearchTree` — nodes are candidates; expanding a measured node asks the proposer for its
children (given the node's candidate and typed findings); UCT selection with a search-memory
prior term; progressive widening (at most ceil(k' * N^alpha) children after N visits) with
asymmetric branching (k' grows with the node's reward relative to the best: promising nodes
widen faster); dead-end pruning (a node whose last m children failed or regressed stops
widening; a failed node without a suggested fix is a closed leaf); deterministic given a seed.
Must not: measure candidates, parse profiler output, or choose the final winner (optimize does).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Hashable
from typing import Any

from ..runtime.result import EvalResult
from .memory import MoveRecord, SearchMemory
from .proposer import Proposal, ProposalRequest, Proposer, bottleneck_of
from .rewards import RewardModel, faster_beyond_spread
from .space import SearchSpace

ROOT = 0


@dataclasses.dataclass(frozen=True)
class TreeParams:
    exploration: float = 0.2  # UCT constant, in reward (log-speed) units: 0.2 ~ 1.22x
    mean_weight: float = 0.25  # Q = w * mean + (1 - w) * best reward of the subtree
    widen_k: float = 1.0
    widen_alpha: float = 0.5
    prior_weight: float = 1.0  # weight of the memory prior in UCT, fading as 1 / (1 + visits)
    dead_end_after: int = 3  # m: consecutive failing/regressing children that close a node
    # a move that failed this many times in this search and never worked is not tried again
    failing_move_after: int = 2


@dataclasses.dataclass
class Node:
    id: int
    parent: int | None
    candidate: Hashable | None  # None only for the root, which stands for the subgraph
    move: str
    reason: str
    prior: float
    result: EvalResult | None = None
    reward: float | None = None
    visits: int = 0
    value_sum: float = 0.0
    best_reward: float = -math.inf
    children: list[int] = dataclasses.field(default_factory=list)
    untried: list[Proposal] | None = None  # None until expanded
    pending: bool = False  # asked, not yet told
    closed: bool = False  # nothing left to try below
    close_reason: str = ""
    bad_streak: int = 0


class SearchTree:
    def __init__(
        self,
        subgraph: Any,
        space: SearchSpace,
        proposer: Proposer,
        *,
        reference_ms: float | None = None,
        memory: SearchMemory | None = None,
        seed: int = 0,
        params: TreeParams | None = None,
    ) -> None:
        self.subgraph, self.space, self.proposer = subgraph, space, proposer
        self.memory, self.seed = memory, seed
        self.params = params or TreeParams()
        self.rewards = RewardModel(reference_ms) if reference_ms else None
        self.rng = random.Random(seed)
        self.nodes: list[Node] = [Node(ROOT, None, None, "root", "subgraph", 0.0)]
        self._by_candidate: dict[Hashable, int] = {}
        self.best_reward = -math.inf
        self.told: list[int] = []
        self._move_failures: dict[str, int] = {}
        self._move_worked: set[str] = set()
        self.kind = str(getattr(subgraph, "kind", "?"))
        self.pattern = str(getattr(subgraph, "pattern", "?"))

    # ---- ask / tell -------------------------------------------------------------------------

    def ask(self, n: int = 1) -> list[tuple[int, Hashable]]:
        """Up to n new (node id, candidate) to measure; [] when the tree is exhausted."""
        out: list[tuple[int, Hashable]] = []
        blocked: set[int] = set()  # nodes whose only open children are pending
        while len(out) < n:
            node = self._select(blocked)
            if node is None:
                break
            out.append((node.id, node.candidate))
        return out

    def tell(self, node_id: int, result: EvalResult) -> float:
        """Record the measurement of an asked node; returns its reward."""
        if not 0 < node_id < len(self.nodes) or not self.nodes[node_id].pending:
            raise ValueError(
                f"node {node_id} was not handed out by ask() or was already told; "
                "tell each asked node exactly once"
            )
        node = self.nodes[node_id]
        node.pending = False
        if self.rewards is None and result.ok and result.median_ms:
            self.rewards = RewardModel(result.median_ms)  # no working baseline: first success
        if self.rewards is not None:
            reward = self.rewards.reward(result)
        else:  # nothing worked yet; failure penalties do not depend on the reference
            reward = RewardModel(1.0).reward(result)
        node.result, node.reward = result, reward
        self.told.append(node_id)
        self.best_reward = max(self.best_reward, reward)
        a: Node | None = node
        while a is not None:
            a.visits += 1
            a.value_sum += reward
            a.best_reward = max(a.best_reward, reward)
            a = None if a.parent is None else self.nodes[a.parent]
        if result.ok:
            self._move_worked.add(node.move)
        else:
            self._move_failures[node.move] = self._move_failures.get(node.move, 0) + 1
        if not result.ok and not any(f.suggestion for f in result.findings):
            self._close(node, "failed")
        parent = self.nodes[node.parent] if node.parent is not None else None
        if parent is not None and parent.result is not None and parent.reward is not None:
            regressed = not result.ok or faster_beyond_spread(parent.result, result)
            parent.bad_streak = parent.bad_streak + 1 if regressed else 0
            if parent.bad_streak >= self.params.dead_end_after and parent.untried != []:
                parent.untried = []  # dead end: no more children, existing ones stay open
                parent.close_reason = "dead_end"
            if self.memory is not None:
                self.memory.record(
                    MoveRecord(
                        self.kind,
                        self.pattern,
                        _value(bottleneck_of(parent.result.findings)),
                        node.move,
                        reward - parent.reward,
                    )
                )
        self._close_finished_ancestors(node)
        return reward

    @property
    def exhausted(self) -> bool:
        return self.nodes[ROOT].closed

    def is_known(self, candidate: Hashable) -> bool:
        return candidate in self._by_candidate

    def failing_move(self, move: str) -> bool:
        """The move failed `failing_move_after` times in this search and never worked."""
        return (
            move not in self._move_worked
            and self._move_failures.get(move, 0) >= self.params.failing_move_after
        )

    # ---- selection and expansion --------------------------------------------------------------

    def _select(self, blocked: set[int]) -> Node | None:
        x = self.nodes[ROOT]
        while True:
            if x.closed:
                return None  # only the root can be reached closed
            if x.untried is None:
                self._expand(x)
            assert x.untried is not None
            while x.untried and (
                self.is_known(x.untried[0].candidate) or self.failing_move(x.untried[0].move)
            ):
                x.untried.pop(0)  # proposed again elsewhere meanwhile, or a move that fails
            open_children = [
                self.nodes[c]
                for c in x.children
                if not self.nodes[c].closed and not self.nodes[c].pending and c not in blocked
            ]
            pending = sum(1 for c in x.children if self.nodes[c].pending)
            all_closed = all(self.nodes[c].closed for c in x.children)
            # pending children count as visits (batched asks widen as if already told)
            if x.untried and (len(x.children) < self.width_limit(x.id, pending) or all_closed):
                return self._add_child(x, x.untried.pop(0))
            if not open_children:
                if x.untried == [] and all_closed:
                    self._close(x, x.close_reason or "exhausted")
                else:
                    blocked.add(x.id)
                if x.id == ROOT:
                    return None
                x = self.nodes[ROOT]
                continue
            x = max(open_children, key=lambda c: (self._uct(x, c), self.rng.random()))

    def _uct(self, parent: Node, child: Node) -> float:
        p = self.params
        # Measurements are near-deterministic, so the value of a subtree is mostly its best
        # reward (single-player MCTS); the mean keeps a little pressure away from subtrees
        # full of failures.
        mean = child.value_sum / child.visits
        q = p.mean_weight * mean + (1 - p.mean_weight) * child.best_reward
        explore = p.exploration * math.sqrt(math.log(parent.visits + 1) / child.visits)
        return q + explore + p.prior_weight * child.prior / (1 + child.visits)

    def width_limit(self, node_id: int, extra_visits: int = 0) -> float:
        """Most children the node may have now: ceil(k' * N^alpha)."""
        x = self.nodes[node_id]
        if x.id == ROOT:
            return math.inf  # every seed candidate is measured
        p = self.params
        rel = 1.0
        if x.reward is not None and math.isfinite(self.best_reward):
            rel = math.exp(min(0.0, x.reward - self.best_reward))  # 1 for the best node
        k = p.widen_k * (0.5 + 1.5 * rel)  # asymmetric: the best node widens 4x the worst
        return math.ceil(k * max(1, x.visits + extra_visits) ** p.widen_alpha)

    def _expand(self, x: Node) -> None:
        if x.id == ROOT:
            seeds = self.space.initial(self.subgraph)
            proposals = [Proposal(c, "initial", "seed") for c in seeds]
        else:
            assert x.result is not None and x.candidate is not None
            bottleneck = _value(bottleneck_of(x.result.findings))
            request = ProposalRequest(
                subgraph=self.subgraph,
                candidate=x.candidate,
                result=x.result,
                space=self.space,
                history=tuple(self._history_entry(self.nodes[i]) for i in self.told),
                move_prior=lambda move: self._prior(bottleneck, move),
                is_known=self.is_known,
            )
            proposals = self.proposer.propose(request)
        unique, seen = [], set()
        for prop in proposals:
            if prop.candidate not in seen and not self.is_known(prop.candidate):
                seen.add(prop.candidate)
                unique.append(prop)
        x.untried = unique

    def _prior(self, bottleneck: str | None, move: str) -> float:
        if self.memory is None:
            return 0.0
        return self.memory.prior(self.kind, self.pattern, bottleneck, move)

    def _add_child(self, x: Node, prop: Proposal) -> Node:
        bottleneck = None if x.result is None else _value(bottleneck_of(x.result.findings))
        prior = self._prior(bottleneck, prop.move) if x.id != ROOT else 0.0
        child = Node(len(self.nodes), x.id, prop.candidate, prop.move, prop.reason, prior)
        child.pending = True
        self.nodes.append(child)
        self._by_candidate[prop.candidate] = child.id
        x.children.append(child.id)
        return child

    def _close(self, node: Node, reason: str) -> None:
        node.closed, node.untried = True, []
        node.close_reason = node.close_reason or reason

    def _close_finished_ancestors(self, node: Node) -> None:
        a = node
        while True:
            done = a.untried == [] and all(
                self.nodes[c].closed and not self.nodes[c].pending for c in a.children
            )
            if done and not a.closed and not a.pending and (a.result is not None or a.id == ROOT):
                self._close(a, a.close_reason or "exhausted")
            if a.parent is None:
                return
            a = self.nodes[a.parent]

    # ---- views ------------------------------------------------------------------------------

    def _history_entry(self, n: Node) -> dict[str, Any]:
        assert n.candidate is not None and n.result is not None
        return {
            "id": n.id,
            "parent": None if n.parent == ROOT else n.parent,
            "move": n.move,
            "candidate": self.space.describe(n.candidate),
            "status": n.result.status.value,
            "median_ms": n.result.median_ms,
            "reward": n.reward,
            "message": n.result.message,  # why it failed: what a proposer can fix
        }

    def to_dict(self) -> dict[str, Any]:
        """The whole tree, JSON-serialisable; equal for equal seeds and measurements."""
        return {
            "seed": self.seed,
            "params": dataclasses.asdict(self.params),
            "nodes": [
                {
                    "id": n.id,
                    "parent": n.parent,
                    "move": n.move,
                    "reason": n.reason,
                    "candidate": None if n.candidate is None else self.space.describe(n.candidate),
                    "status": None if n.result is None else n.result.status.value,
                    "median_ms": None if n.result is None else n.result.median_ms,
                    "reward": n.reward,
                    "prior": n.prior,
                    "visits": n.visits,
                    "value_sum": n.value_sum,
                    "children": list(n.children),
                    "closed": n.closed,
                    "close_reason": n.close_reason,
                }
                for n in self.nodes
            ],
        }

    def summary(self) -> dict[str, Any]:
        measured = [n for n in self.nodes[1:] if n.result is not None]
        return {
            "nodes": len(self.nodes) - 1,
            "measured": len(measured),
            "failed": sum(1 for n in measured if not n.result or not n.result.ok),
            "dead_ends": sum(1 for n in self.nodes if n.close_reason == "dead_end"),
            "max_depth": max((self.depth(n.id) for n in measured), default=0),
            "exhausted": self.exhausted,
        }

    def depth(self, node_id: int) -> int:
        d, n = 0, self.nodes[node_id]
        while n.parent is not None:
            d, n = d + 1, self.nodes[n.parent]
        return d


def _value(b: Any) -> str | None:
    return None if b is None else str(b.value)
