"""The codegen adapter (against a stand-in module with the codegen contract of COMMON.md) and
move names."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import types

import pytest

from kernelpro_backend.search import CodegenSpace, codegen_space, move_name
from kernelpro_backend.search.space import ROLE_NAMES


class IllegalSpec(ValueError):
    pass


class Unsupported(Exception):
    pass


class Role(str, enum.Enum):  # codegen's KnobRole
    WARPS = "warps"


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    template: str
    knobs: tuple[tuple[str, object], ...]

    def with_knobs(self, **changes):
        if changes.get("num_warps", 1) > 8:
            raise IllegalSpec("num_warps > 8")
        return KernelSpec(self.template, tuple(sorted({**dict(self.knobs), **changes}.items())))

    @property
    def digest(self):
        return f"d{hash(self.knobs) & 0xFFFF:x}"


def lower(subgraph):
    if subgraph == "unsupported":
        raise Unsupported("no template")
    return KernelSpec("softmax", (("num_warps", 4),))


fake_codegen = types.SimpleNamespace(
    KernelSpec=KernelSpec,
    IllegalSpec=IllegalSpec,
    Unsupported=Unsupported,
    lower=lower,
    knob_space=lambda spec: {"num_warps": (1, 2, 4, 8, 16)},
    knob_roles=lambda spec: {"num_warps": Role.WARPS},
    alternatives=lambda spec: [],
    seed_configs=lambda spec: [],
)


def test_codegen_space_adapts_the_codegen_contract():
    space = CodegenSpace(codegen=fake_codegen, illegal=IllegalSpec)
    spec, *variants = space.initial("a subgraph")
    # the seed, then a sibling with one knob moved to a neighbouring legal value
    assert [space.knobs(v) for v in variants] == [{"num_warps": 8}]
    assert space.initial("unsupported") == []
    assert space.knob_space(spec) == {"num_warps": (1, 2, 4, 8, 16)}
    assert space.knobs(spec) == {"num_warps": 4}
    assert space.knob_roles(spec) == {"num_warps": "warps"}
    assert space.knobs(space.with_knobs(spec, num_warps=8)) == {"num_warps": 8}
    with pytest.raises(IllegalSpec):
        space.with_knobs(spec, num_warps=16)
    assert space.describe(spec)["knobs"] == {"num_warps": 4}
    source = types.SimpleNamespace(language="triton", source="def f(): pass", entry="f")
    assert space.knob_space(source) == {} and space.knobs(source) == {}
    assert space.knob_roles(source) == {}
    assert space.describe(source)["language"] == "triton"
    with pytest.raises(IllegalSpec, match="no knobs"):
        space.with_knobs(source, num_warps=2)


def test_initial_candidates_hold_the_other_templates_right_after_the_seed():
    """A program that another template can run (a long row as a CUDA cluster kernel) is
    measured beside the seed, before the seed's one-knob siblings."""
    other = KernelSpec("cluster", (("num_warps", 16),))
    space = CodegenSpace(
        codegen=types.SimpleNamespace(**{**vars(fake_codegen), "alternatives": lambda s: [other]}),
        illegal=IllegalSpec,
    )
    seed, first, *rest = space.initial("a subgraph")
    assert space.knobs(seed) == {"num_warps": 4}
    assert first is other
    assert [space.knobs(v) for v in rest] == [{"num_warps": 8}]


def test_other_configurations_of_the_seed_come_after_its_one_knob_siblings():
    """A GEMM's few Inductor tiles (codegen.seed_configs) are measured at the root too, after
    the seed's siblings; one equal to a candidate already listed is not repeated."""
    wide = KernelSpec("softmax", (("num_warps", 2),))
    space = CodegenSpace(
        codegen=types.SimpleNamespace(
            **{**vars(fake_codegen), "seed_configs": lambda s: [wide, s.with_knobs(num_warps=8)]}
        ),
        illegal=IllegalSpec,
    )
    seed, *rest = space.initial("a subgraph")
    assert [space.knobs(c) for c in rest] == [{"num_warps": 8}, {"num_warps": 2}]


def test_winners_at_other_sizes_are_measured_right_after_the_seed():
    """An instance of a symbolic subgraph carries the configurations that won at its other
    sizes; each is applied to this size's spec of its template, the illegal ones dropped."""
    other = KernelSpec("cluster", (("num_warps", 4),))
    space = CodegenSpace(
        codegen=types.SimpleNamespace(**{**vars(fake_codegen), "alternatives": lambda s: [other]}),
        illegal=IllegalSpec,
    )
    subgraph = types.SimpleNamespace(
        hints=(
            ("cluster", (("num_warps", 2),)),
            ("softmax", (("num_warps", 16),)),  # illegal here: left out
            ("softmax", (("num_warps", 1),)),
            ("gone", (("num_warps", 2),)),  # no spec of that template at this size
        )
    )
    seed, *rest = space.initial(subgraph)
    assert seed.template == "softmax" and space.knobs(seed) == {"num_warps": 4}
    assert [(c.template, space.knobs(c)) for c in rest[:3]] == [
        ("cluster", {"num_warps": 2}),
        ("softmax", {"num_warps": 1}),
        ("cluster", {"num_warps": 4}),
    ]


def test_a_proof_of_hints_measures_them_alone():
    space = CodegenSpace(codegen=fake_codegen, illegal=IllegalSpec)
    subgraph = types.SimpleNamespace(hints=(("softmax", (("num_warps", 2),)),), hints_only=True)
    assert [space.knobs(c) for c in space.initial(subgraph)] == [{"num_warps": 2}]


@pytest.mark.skipif(
    importlib.util.find_spec("kernelpro_backend.codegen") is None,
    reason="the codegen package is not merged in this checkout",
)
def test_codegen_space_imports_the_real_codegen():
    space = codegen_space()
    assert issubclass(space.illegal, ValueError)
    from kernelpro_backend.codegen import KnobRole

    # the search's role vocabulary is codegen's, value for value
    assert [r.value for r in KnobRole] == list(ROLE_NAMES)


def test_move_names_generalise_across_subgraphs():
    assert move_name({"a": 1, "b": "x"}, {"a": 2, "b": "x"}) == "a:up"
    assert move_name({"a": 4, "p": False}, {"a": 2, "p": True}) == "a:down+p=True"
    assert move_name({"a": 1}, {"a": 1}) == "same"
