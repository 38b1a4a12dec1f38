"""Graph passes: classify aten ops, partition graphs into fusable subgraphs, key and extract them,
and rebuild a subgraph from its canonical text.

Must not: launch kernels (runtime/ does) or choose kernels (search/ and the cache do)."""

from .group import Group
from .keys import KEY_SCHEMA_VERSION, SubgraphKey
from .partition import partition
from .rebuild import RebuildError, rebuild_module, rebuild_subgraph
from .subgraph import IntRange, Subgraph, find_subgraphs, random_inputs

__all__ = [
    "KEY_SCHEMA_VERSION",
    "Group",
    "IntRange",
    "RebuildError",
    "Subgraph",
    "SubgraphKey",
    "find_subgraphs",
    "partition",
    "rebuild_module",
    "rebuild_subgraph",
    "random_inputs",
]
