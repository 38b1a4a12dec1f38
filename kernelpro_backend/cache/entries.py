"""Storing a subgraph's kernel and asking which subgraphs still lack one.

Owns: `describe` (an artifact with its subgraph's pattern, kind, ops and canonical text filled
in), `store_winner` and `pending` (what a resumed warm-up still has to search).
Must not: decide whether to search or use an entry (tuner/finder.py does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ..fx_passes import Subgraph
from .artifact import KernelArtifact
from .store import KernelCache
from .toolchain import CacheKey


def describe(artifact: KernelArtifact, subgraph: Subgraph) -> KernelArtifact:
    """The artifact with the subgraph's pattern, kind, ops, canonical text and, for an instance
    of a symbolic subgraph, its family filled in."""
    return dataclasses.replace(
        artifact,
        pattern=artifact.pattern or subgraph.pattern,
        kind=artifact.kind or subgraph.kind,
        ops=artifact.ops or tuple(subgraph.ops),
        subgraph_text=artifact.subgraph_text or subgraph.text,
        family=artifact.family or subgraph.family,
    )


def store_winner(cache: KernelCache, subgraph: Subgraph, artifact: KernelArtifact) -> CacheKey:
    """Store a search winner for `subgraph` as soon as it is found (so an interrupted warm-up
    keeps every subgraph already done) and return its key."""
    key = cache.key_for(subgraph.key)
    cache.put(key, describe(artifact, subgraph))
    return key


def pending(cache: KernelCache, subgraphs: Iterable[Subgraph]) -> list[Subgraph]:
    """The subgraphs (with fixed shapes) that have no usable entry yet: what a resumed warm-up
    still has to search, in the given order, each key once."""
    todo: dict[str, Subgraph] = {}
    for sg in subgraphs:
        if not sg.symbolic:
            todo.setdefault(cache.key_for(sg.key).digest, sg)
    keys = {cache.key_for(sg.key): sg for sg in todo.values()}
    return [keys[k] for k in cache.missing(keys)]
