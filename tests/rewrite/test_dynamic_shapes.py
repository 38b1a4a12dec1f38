"""Symbolic subgraphs get kernels: after a shape change torch.compile recompiles with symbolic
sizes, and each symbolic subgraph whose compile-time sizes have a kernel goes behind a shape
dispatcher that serves every size with that size's kernel, or the fallback's compiled subgraph
where there is none (recorded as a miss with its sizes)."""

from __future__ import annotations

import torch

from kernelpro_backend import make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.fx_passes.concrete import hint_sizes, instance, symbolic_key
from kernelpro_backend.options import Options
from kernelpro_backend.rewrite.dispatch import DISPATCHERS, dispatch_stats
from kernelpro_backend.rewrite.providers import ReferenceProvider
from kernelpro_backend.tuner.finder import KernelFinder


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.lin(self.norm(x)) * 2.0, -1)


class OnlyAt(ReferenceProvider):
    """Kernels only for instances whose inputs have one of `rows` as a size: the others miss."""

    def __init__(self, rows: set[int]) -> None:
        super().__init__()
        self.rows = rows

    def find(self, subgraph: Subgraph):
        sizes = {d for shape, _, _ in subgraph.input_meta for d in shape}
        return super().find(subgraph) if sizes & self.rows else None


def _steps(provider, lengths, fallback="eager", options=None, sessions=None):
    """Train steps of Block at each sequence length, compiled and eager side by side."""
    torch.manual_seed(0)
    model = Block()
    backend = make_backend(provider=provider, sessions=sessions)
    compiled = torch.compile(
        model, backend=backend, options={"fallback": fallback, **(options or {})}
    )
    for n in lengths:
        x = torch.randn(2, n, 32, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)
        out = compiled(x)
        out.square().sum().backward()
        ref = model(x_ref)
        ref.square().sum().backward()
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-6)


def _fresh():
    torch._dynamo.reset()
    for _, d in DISPATCHERS.items():
        d.routes.clear()


def test_every_size_after_a_shape_change_runs_its_own_kernel():
    _fresh()
    provider = ReferenceProvider()
    sessions: list[CompileSession] = []
    _steps(provider, [8, 12, 20, 12], sessions=sessions)
    dispatched = {r.graph: r.dispatched for s in sessions for r in s.reports if r.dispatched}
    assert dispatched.keys() == {"forward", "backward"}  # the symbolic recompile's graphs
    stats = dispatch_stats()
    assert stats["kernel_calls"] > 0 and stats["miss_calls"] == 0
    # The provider saw static instances at each length the symbolic graph ran (12, 20).
    seen = {d for sg in provider.provided for shape, _, _ in sg.input_meta for d in shape}
    assert {12, 20} <= seen
    assert all(not sg.symbolic for sg in provider.provided)


def test_sizes_without_a_kernel_run_the_compiled_fallback():
    _fresh()
    _steps(OnlyAt({12, 24}), [8, 12, 20, 12, 28], fallback="inductor")
    stats = dispatch_stats()
    assert stats["kernel_calls"] > 0 and stats["miss_calls"] > 0


def test_dynamic_shapes_off_keeps_symbolic_subgraphs_on_the_fallback():
    _fresh()
    sessions: list[CompileSession] = []
    _steps(ReferenceProvider(), [8, 12, 20], options={"dynamic_shapes": "off"}, sessions=sessions)
    reports = [r for s in sessions for r in s.reports]
    assert not any(r.dispatched for r in reports)
    assert any(r.symbolic for r in reports)


def test_a_symbolic_subgraph_without_a_kernel_at_its_compile_sizes_is_left_alone():
    _fresh()
    sessions: list[CompileSession] = []
    _steps(OnlyAt({999}), [8, 12, 20], sessions=sessions)
    reports = [r for s in sessions for r in s.reports]
    assert not any(r.dispatched for r in reports) and any(r.symbolic for r in reports)


def _symbolic_subgraphs() -> list[Subgraph]:
    found: list[Subgraph] = []

    def observe(kind, subgraphs):
        found.extend(sg for sg in subgraphs if sg.symbolic)

    torch._dynamo.reset()
    compiled = torch.compile(
        Block(), backend=make_backend(provider=ReferenceProvider(), observer=observe),
        options={"fallback": "eager", "dynamic_shapes": "off"}, dynamic=True,
    )  # fmt: skip
    compiled(torch.randn(2, 9, 32, requires_grad=True)).sum().backward()
    return found


def test_symbolic_keys_are_stable_across_compiles():
    first = _symbolic_subgraphs()
    second = [symbolic_key(sg).digest for sg in _symbolic_subgraphs()]
    assert first and [symbolic_key(sg).digest for sg in first] == second
    assert len(set(second)) > 1  # different subgraphs, different keys
    # Sizes are written over canonical symbols, not dynamo's names.
    assert any("k0" in i for sg in first for i in symbolic_key(sg).inputs)
    assert not any("s0" in i or "s1" in i for sg in first for i in symbolic_key(sg).inputs)


def test_instances_at_other_sizes_are_static_and_keyed_by_their_sizes():
    sg = next(s for s in _symbolic_subgraphs() if s.graph == "forward" and s.kind == "reduction")

    def longer(size):  # the sequence length 9 -> 18
        if isinstance(size, int):
            return size
        shape = tuple(18 if d == 9 else d for d in size[0])
        return (shape, torch.empty(shape).stride(), size[2])

    hint = hint_sizes(sg.inputs)
    at_hint = instance(sg, hint).subgraph
    other = instance(sg, tuple(longer(s) for s in hint)).subgraph
    assert not at_hint.symbolic and not other.symbolic
    assert at_hint.key.digest != other.key.digest
    assert any(18 in shape for shape, _, _ in other.input_meta)
    assert not any(18 in shape for shape, _, _ in at_hint.input_meta)


def test_a_missed_size_is_recorded_with_its_sizes(tmp_path):
    _fresh()
    options = Options.resolve(options={"cache_dir": str(tmp_path), "fallback": "eager"})
    finder = KernelFinder.from_options(options)

    class Provider(ReferenceProvider):
        """Kernels at the compile-time sizes; the finder's policy (and its manifest) for the
        instances met at run time."""

        def find_dynamic(self, subgraph):
            sizes = {d for shape, _, _ in subgraph.input_meta for d in shape}
            if 12 in sizes:
                return self.find(subgraph)
            return finder.find_dynamic(subgraph)

    _steps(Provider(), [8, 12, 20])
    recorded = finder.cache.misses.entries()
    assert recorded
    assert any(20 in shape for r in recorded for shape, _, _ in r["inputs"])


def test_each_instance_carries_the_values_of_its_dynamic_dimensions():
    """What `compile_sizes` is checked against: the run-time sizes of the dims that are symbols
    (the sequence length here), not the static ones (batch 2, width 32)."""
    _fresh()

    class Recording(ReferenceProvider):
        def __init__(self) -> None:
            super().__init__()
            self.dynamic: set[tuple[int, ...]] = set()

        def find_dynamic(self, subgraph):
            self.dynamic.add(subgraph.dynamic_sizes)
            return self.find(subgraph)

    provider = Recording()
    _steps(provider, [8, 12, 20])
    assert provider.dynamic == {(12,), (20,)}


def test_dynamic_sizes_read_bare_symbols_and_solve_multiples():
    import sympy

    from kernelpro_backend.fx_passes.concrete import dynamic_sizes

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    sizes = (((48, 32), (32, 1), "float32"), 7)
    # dim 0 of input 0 is 2*s0 (solved: s0 = 24); input 1 is s1 itself (7)
    assert dynamic_sizes([(0, 0, 2 * s0), (1, -1, s1)], sizes) == (7, 24)
    # a bare symbol wins over an expression of the same symbol
    assert dynamic_sizes([(0, 0, 2 * s0), (0, 1, s0)], sizes) == (32,)


def test_a_size_expression_sympy_cannot_solve_is_left_out_not_raised():
    """Swin's patch merging under automatic dynamic shapes: a dimension of
    `((s0//4) + Mod(4 - Mod(s0//4, 4), 4))//4 - 2`; solving it raised NotImplementedError out of
    the backend (a second model compiled in one process: `kernelpro explain` of T5 then Swin)."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod

    from kernelpro_backend.fx_passes.concrete import dynamic_sizes

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    quarter = FloorDiv(s0, 4)
    hard = FloorDiv(quarter + Mod(4 - Mod(quarter, 4), 4), 4) - 2
    sizes = (((3, 5), (5, 1), "float32"), 9)
    assert dynamic_sizes([(0, 0, hard), (1, -1, s1)], sizes) == (9,)


def test_missed_sizes_share_one_size_generic_compile_of_the_fallback():
    """More sizes without a kernel than any per-size compile budget: every one runs the same
    compiled, size-generic fallback (not the subgraph's ATen ops), matching eager."""
    _fresh()
    lengths = [8, 12, *range(20, 100, 8)]  # 10 sizes after the first change miss
    _steps(OnlyAt({12}), lengths, fallback="inductor")
    dispatchers = [d for _, d in DISPATCHERS.items() if d.routes]  # this test's (routes reset)
    assert dispatchers
    for d in dispatchers:
        missed = [r for r in d.routes.values() if r.kernel is None]
        assert len(missed) >= 10
        assert d._generic is not None
        assert all(r.miss_fn is d._generic for r in missed)
