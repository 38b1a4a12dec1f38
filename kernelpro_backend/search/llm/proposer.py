"""`LLMProposer`: children of a measured node proposed by an LLM.

Owns: one chat request per expanded node (prompt.py builds it, client.py sends it), turning the
answer's proposals into candidates - knob changes through the search space's `with_knobs`
("llm:knobs:<change>"; an illegal value or combination drops that proposal with a log line),
free-form Triton/CUDA sources as `SourceCandidate`s ("llm:rewrite:<language>") - dropping
duplicates, and, when the answer gives nothing usable (request failed, malformed answer, every
proposal dropped), the fallback proposer's children, with a log line saying so.
Must not: run, compile or import anything the LLM wrote (proposals are data; the evaluator
builds them in an isolated worker), measure, or parse profiler output.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from ...runtime.candidate import LANGUAGES, SourceCandidate
from ..proposer import Proposal, ProposalRequest, Proposer
from ..rules import ALLOWED_PRECISIONS
from ..space import move_name
from .answer import proposal_items
from .client import ChatClient
from .prompt import messages

log = logging.getLogger("kernelpro.llm")

MAX_PROPOSALS = 4  # per node: the tree widens slowly (ceil(k * N^0.5)), more would go unused
MAX_SOURCE_CHARS = 200_000  # a rewrite larger than this is not a kernel
MAX_REASON_CHARS = 200


@dataclasses.dataclass
class ProposalStats:
    answers: int = 0
    malformed: int = 0  # answers with no readable proposals
    proposed: int = 0  # proposals in readable answers
    accepted: int = 0  # became children
    illegal: int = 0  # knob changes the space rejected, or sources outside the contract
    duplicates: int = 0
    fallbacks: int = 0  # nodes given the fallback proposer's children instead


class LLMProposer:
    name = "llm"

    def __init__(
        self,
        client: ChatClient,
        *,
        max_proposals: int = MAX_PROPOSALS,
        languages: Sequence[str] = LANGUAGES,
        fallback: Proposer | None = None,
    ) -> None:
        unknown = set(languages) - set(LANGUAGES)
        if unknown:
            raise ValueError(f"languages {sorted(unknown)} unknown; use some of {LANGUAGES}")
        self.client, self.max_proposals = client, max_proposals
        self.languages, self.fallback = tuple(languages), fallback
        self.counts = ProposalStats()

    @classmethod
    def from_environ(
        cls,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        client_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> LLMProposer:
        """The proposer for the endpoint in OPENAI_BASE_URL / OPENAI_API_KEY (see
        ChatClient.from_environ); raises LLMSetupError saying what to install or set."""
        client = ChatClient.from_environ(model, environ, **dict(client_options or {}))
        return cls(client, **kwargs)

    def stats(self) -> dict[str, Any]:
        """Counters for the search log (optimize logs their change over one search)."""
        return {
            "model": self.client.model,
            **dataclasses.asdict(self.client.stats),
            **dataclasses.asdict(self.counts),
        }

    def propose(self, request: ProposalRequest) -> list[Proposal]:
        answer = self.client.complete(messages(request, self.max_proposals, self.languages))
        if answer is None:  # the client logged why
            return self._fall_back(request, "the request failed")
        self.counts.answers += 1
        items = proposal_items(answer.text)
        if items is None:
            self.counts.malformed += 1
            cut = " (cut at the server's token limit)" if answer.finish_reason == "length" else ""
            log.warning(
                "malformed answer%s, no proposals read from it: %r",
                cut,
                _snippet(answer.text),
            )
            return self._fall_back(request, "its answer was malformed")
        self.counts.proposed += len(items)
        out: list[Proposal] = []
        seen: set[Hashable] = set()
        for i, item in enumerate(items[: self.max_proposals]):
            prop = self._proposal(request, item, score=float(self.max_proposals - i))
            if prop is None:
                continue
            if prop.candidate in seen or request.is_known(prop.candidate):
                self.counts.duplicates += 1
                log.info("proposal %d (%s) is already in the tree", i, prop.move)
                continue
            seen.add(prop.candidate)
            out.append(prop)
        if len(items) > self.max_proposals:
            log.info(
                "%d proposals, %d asked for; the rest are ignored",
                len(items),
                self.max_proposals,
            )
        self.counts.accepted += len(out)
        if not out:
            return self._fall_back(request, f"none of its {len(items)} proposals was usable")
        return out

    def _proposal(self, request: ProposalRequest, item: Any, score: float) -> Proposal | None:
        """The item as a Proposal, or None after logging why it is dropped."""
        try:
            if not isinstance(item, dict):
                raise _Dropped(f"not a JSON object: {_snippet(repr(item))}")
            if ("knobs" in item) == ("source" in item):
                raise _Dropped("a proposal has exactly one of 'knobs' and 'source'")
            reason = "llm: " + " ".join(str(item.get("reason") or "no reason given").split())
            reason = reason[:MAX_REASON_CHARS]
            if "knobs" in item:
                return self._knob_change(request, item["knobs"], reason, score)
            return self._rewrite(item, reason, score)
        except _Dropped as e:
            self.counts.illegal += 1
            log.info("proposal dropped: %s", e)
            return None

    def _knob_change(
        self, request: ProposalRequest, knobs: Any, reason: str, score: float
    ) -> Proposal:
        space, parent = request.space, request.candidate
        if not isinstance(knobs, dict) or not knobs:
            raise _Dropped(f"'knobs' must be a non-empty object, got {_snippet(repr(knobs))}")
        if not space.knob_space(parent):
            raise _Dropped("a knob change of free-form source (it has no knobs)")
        changes = {name: _json_knob(v) for name, v in knobs.items()}
        bad = {k: v for k, v in changes.items() if not isinstance(v, (bool, int, float, str))}
        if bad:
            raise _Dropped(f"knob values must be numbers, strings or booleans: {bad}")
        allowed = ALLOWED_PRECISIONS.get(getattr(request.subgraph, "precision", "ieee"), ("ieee",))
        roles = space.knob_roles(parent)
        for k, v in changes.items():
            if roles.get(k) == "precision" and v not in allowed:
                raise _Dropped(
                    f"{k}={v!r} is outside the subgraph's precision policy (allowed: {allowed})"
                )
        try:
            child = space.with_knobs(parent, **changes)
        except space.illegal as e:
            raise _Dropped(f"knobs {changes} are illegal: {e}") from None
        move = "llm:knobs:" + move_name(space.knobs(parent), space.knobs(child))
        return Proposal(child, move, reason, score)

    def _rewrite(self, item: dict[str, Any], reason: str, score: float) -> Proposal:
        language, entry, source = item.get("language"), item.get("entry"), item.get("source")
        if language not in self.languages:
            raise _Dropped(f"language {language!r}; this search takes {list(self.languages)}")
        if not isinstance(entry, str) or not entry.isidentifier():
            raise _Dropped(f"'entry' must name a function or kernel, got {entry!r}")
        if not isinstance(source, str) or entry not in source:
            raise _Dropped(f"'source' must be text that defines {entry!r}")
        if len(source) > MAX_SOURCE_CHARS:
            raise _Dropped(f"a {len(source)}-character source (limit {MAX_SOURCE_CHARS})")
        candidate = SourceCandidate(str(language), source, entry)
        return Proposal(candidate, f"llm:rewrite:{language}", reason, score)

    def _fall_back(self, request: ProposalRequest, why: str) -> list[Proposal]:
        if self.fallback is None:
            log.warning("%s; this node gets no children", why)
            return []
        self.counts.fallbacks += 1
        proposals = self.fallback.propose(request)
        log.warning(
            "%s; this node gets %d children from the %r proposer instead",
            why,
            len(proposals),
            self.fallback.name,
        )
        return proposals


class _Dropped(Exception):
    """A proposal that cannot become a candidate; the message says why (logged, counted)."""


def _json_knob(value: Any) -> Any:
    """JSON has one number type: 4.0 for a knob of 4 is the integer 4."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _snippet(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
