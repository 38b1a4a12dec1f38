"""The row-resident CUDA template ("row_cluster") on the CPU: which row programs and knobs it
takes, the launch its header asks for, the source compiled by nvcc where present, and how a
cached CUDA spec kernel is proved (its cubin) and rebuilt (its stored source). The kernels run
and are checked against PyTorch in test_cluster_gpu.py."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from harness import cluster_alternatives, collect

from kernelpro_backend.cache.artifact import KernelArtifact
from kernelpro_backend.codegen import IllegalSpec, Unsupported, knob_space, render
from kernelpro_backend.codegen.cluster_rules import cluster_shape
from kernelpro_backend.codegen.defaults import CLUSTER_MIN_COLS
from kernelpro_backend.examples import RMSNorm
from kernelpro_backend.lowering import lower
from kernelpro_backend.runtime import candidate as candidate_module
from kernelpro_backend.runtime.candidate import SourceCandidate, SpecCandidate
from kernelpro_backend.runtime.cuda.compile import find_nvcc
from kernelpro_backend.runtime.cuda.plan import resolve
from kernelpro_backend.runtime.cuda.source import TensorMeta, parse_launch
from kernelpro_backend.tuner.artifacts import artifact_candidate


class _Rows(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.ln, self.rms = nn.LayerNorm(n), RMSNorm(n)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        y = x.softmax(-1) * 3 + self.ln(x) + self.rms(x)
        return y.square().mean() + F.cross_entropy(x, t)


def _seeds(n: int, rows: int = 3) -> list:
    x = torch.randn(rows, n, requires_grad=True)
    t = torch.randint(0, n, (rows,))
    out = []
    for sg in collect(_Rows(n), [x, t]):
        try:
            out.append((sg, lower(sg)))
        except Exception:
            continue
    return out


@pytest.fixture(scope="module")
def long_rows():
    return _seeds(8192)


def test_long_row_programs_get_a_cluster_alternative_forward_and_backward(long_rows):
    patterns = {}
    for sg, seed in long_rows:
        for alt in cluster_alternatives(seed):
            assert alt.template == "row_cluster"
            assert (alt.loads, alt.ops, alt.stores) == (seed.loads, seed.ops, seed.stores)
            patterns.setdefault(sg.graph.split("_")[0], set()).add(seed.pattern)
    # softmax is a plain "reduction" program (max, exp, sum); the norms and cross-entropy
    # have their own patterns; the backward's row programs are gradients of all of them
    assert patterns["forward"] == {"reduction", "norm", "rms_norm", "cross_entropy"}
    assert patterns["backward"] == {"reduction"}


def test_softmax_statistics_cross_the_cluster_as_one_pair(long_rows):
    """ONLINE=pair: a max and its sum of exp(y - max) fold in one wave and one (max, sum)
    exchange; programs without that pair (the norms) keep ONLINE=wave and refuse pair."""
    online = {}
    for sg, seed in long_rows:
        for alt in cluster_alternatives(seed):
            online.setdefault((sg.graph.split("_")[0], seed.pattern), set()).add(alt.knob("ONLINE"))
            if alt.knob("ONLINE") == "wave":
                with pytest.raises(IllegalSpec, match="ONLINE=pair"):
                    alt.with_knobs(ONLINE="pair")
                continue
            spec = alt.with_knobs(CLUSTER=max(knob_space(alt)["CLUSTER"]))
            paired = render(spec).source
            waves = render(spec.with_knobs(ONLINE="wave")).source
            # each body (vector and 1-element) has one pair exchange; the two-wave form has
            # a cluster exchange per reduction instead
            assert paired.count("kp_cluster_pair<") == 2
            assert waves.count("kp_cluster_pair<") == 0
            assert waves.count("kp_cluster<") == paired.count("kp_cluster<") + 4
    assert online[("forward", "reduction")] == {"pair"}
    assert online[("forward", "cross_entropy")] == {"pair"}
    assert online[("forward", "norm")] == online[("forward", "rms_norm")] == {"wave"}


def test_rows_held_in_shared_memory_fit_its_limit_and_ask_for_it(long_rows):
    """HOLD=shared: the CTA's share of each input a reduction reads is copied to shared memory
    (cp.async), so the register budget no longer bounds the share; the shared-memory limit
    does, and the launch asks for the bytes."""
    from kernelpro_backend.codegen.cluster_rules import SHARED_LIMIT

    held = 0
    for _, seed in long_rows:
        for alt in cluster_alternatives(seed):
            shape = cluster_shape(alt, dict(alt.knobs))
            if not shape.resident:
                with pytest.raises(IllegalSpec, match="HOLD=shared"):
                    alt.with_knobs(HOLD="shared")
                continue
            # 8192 values on one warp: 256 a thread, far beyond the register budget, legal
            # in shared memory
            with pytest.raises(IllegalSpec, match="registers"):
                alt.with_knobs(CLUSTER=1, num_warps=1)
            spec = alt.with_knobs(HOLD="shared", CLUSTER=1, num_warps=1)
            shape = cluster_shape(spec, dict(spec.knobs))
            offsets, total = shape.shared_offsets()
            assert total == sum(8192 * size for size in shape.resident_sizes) <= SHARED_LIMIT
            assert all(o % 16 == 0 for o in offsets)
            r = render(spec)
            plan = resolve(parse_launch(r.source, r.entry), [TensorMeta(*m) for m in spec.inputs])
            assert plan.steps[0].smem == total
            assert "kp_cp_async_wait();" in r.source and "extern __shared__" in r.source
            assert render(alt).source.count("kp_cp_async<") == 0
            held += 1
    assert held >= 3
    # split: a thread's first half of vectors in registers, the rest in shared memory
    (sg, seed), *_ = [s for s in _seeds(65536, rows=1) if cluster_alternatives(s[1])]
    (alt,) = cluster_alternatives(seed)
    # rows this long start split at 16 warps, 64 values a thread (SPLIT_MIN_COLS)
    assert (alt.knob("HOLD"), alt.knob("num_warps"), alt.knob("CLUSTER")) == ("split", 16, 2)
    split = alt.with_knobs(HOLD="split", CLUSTER=4, num_warps=8)  # 64 values a thread
    shape = cluster_shape(split, dict(split.knobs))
    assert shape.in_registers == 32 and shape.elements == 64
    assert shape.shared_offsets()[1] == 32 * 256 * 4 * len(shape.resident)
    source = render(split).source
    assert "if (k < 8) kp_load<" in source and "if (k >= 8) kp_load<" in source
    with pytest.raises(IllegalSpec, match="registers"):  # 256 values: 128 in registers
        alt.with_knobs(HOLD="split", CLUSTER=1, num_warps=8)
    with pytest.raises(IllegalSpec, match="two vectors"):
        alt.with_knobs(HOLD="split", CLUSTER=16, num_warps=32)
    (sg, seed), *_ = [s for s in _seeds(262144, rows=1) if cluster_alternatives(s[1])]
    (alt,) = cluster_alternatives(seed)
    with pytest.raises(IllegalSpec, match="shared memory"):
        alt.with_knobs(HOLD="shared", CLUSTER=1, num_warps=32)  # 1 MiB of float32


def test_cross_entropy_backward_reads_its_column_index_input_an_element_at_a_time():
    """The gradient compares each column with the target through an int64 column-index input
    (`eq(iota, target)` from the one-hot): read element by element (never vectorised or held),
    so the backward runs row-resident too."""
    x = torch.randn(3, 8192, requires_grad=True)
    t = torch.randint(0, 8192, (3,))
    found = 0
    for sg in collect(_CrossEntropy(), [x, t]):
        seed = lower(sg)
        ints = [
            k for k, (inp, _, _) in enumerate(seed.loads) if seed.inputs[inp][2] == "int64"
        ]  # fmt: skip
        if not sg.graph.startswith("backward") or not ints:
            continue
        (alt,) = cluster_alternatives(seed)
        shape = cluster_shape(alt, dict(alt.knobs))
        assert not set(ints) & set(shape.resident)
        source = render(alt).source
        inp = seed.loads[ints[0]][0]
        assert f"(long long)(in{inp}[" in source and f"in{inp} %" not in source
        found += 1
    assert found == 1


class _CrossEntropy(nn.Module):
    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(x, t)


def test_short_rows_stay_with_the_triton_template():
    for _, seed in _seeds(CLUSTER_MIN_COLS // 2):
        assert cluster_alternatives(seed) == []


def test_cluster_knobs_hold_the_row_within_the_register_budget(long_rows):
    for _, seed in long_rows:
        for alt in cluster_alternatives(seed):
            shape = cluster_shape(alt, dict(alt.knobs))
            assert shape.elements * max(1, len(shape.resident)) <= 64
            assert shape.per_thread * shape.threads * shape.cluster >= shape.vectors
            space = knob_space(alt)
            assert space["CLUSTER"] and space["VEC"] and space["num_warps"]
            with pytest.raises(IllegalSpec, match="registers"):
                alt.with_knobs(CLUSTER=1, num_warps=1)  # 8192 values on 32 threads


def test_vector_width_must_divide_the_row_and_fit_16_bytes():
    (sg, seed), *_ = [s for s in _seeds(4099) if cluster_alternatives(s[1])]
    (alt,) = cluster_alternatives(seed)
    assert alt.knob("VEC") == 1  # 4099 columns: no wider vector divides the row
    with pytest.raises(IllegalSpec, match="does not divide"):
        alt.with_knobs(VEC=2)
    fp32 = next(a for _, s in _seeds(8192) for a in cluster_alternatives(s))
    with pytest.raises(IllegalSpec, match="16-byte"):
        fp32.with_knobs(VEC=8)


def test_strided_rows_are_refused():
    _, seed = next(s for s in _seeds(8192) if cluster_alternatives(s[1]))
    (alt,) = cluster_alternatives(seed)
    load = alt.loads[0]
    # the column dim read with stride 2: not a contiguous row
    strided = tuple((2 * c if a == 1 else c, a) for c, a in load[2])
    with pytest.raises(IllegalSpec, match="strides"):
        dataclasses.replace(alt, loads=((load[0], load[1], strided), *alt.loads[1:]))


def test_header_launches_one_cluster_per_row(long_rows):
    for _, seed in long_rows:
        for alt in cluster_alternatives(seed):
            rendered = render(alt)
            assert rendered.language == "cuda"
            launch = parse_launch(rendered.source, rendered.entry)
            metas = [TensorMeta(*m) for m in alt.inputs]
            plan = resolve(launch, metas)
            shape = cluster_shape(alt, dict(alt.knobs))
            (step,) = plan.steps
            assert step.grid == (shape.rows * shape.cluster, 1, 1)
            assert step.block == (shape.threads, 1, 1)
            assert [o.shape for o in plan.outputs] == [tuple(o[0]) for o in alt.outputs]
            if shape.cluster > 1:
                assert f"__cluster_dims__({shape.cluster}, 1, 1)" in rendered.source


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_sources_compile_with_nvcc_for_hopper(long_rows, tmp_path):
    from kernelpro_backend.runtime.cuda.compile import compile_cuda

    compiled = 0
    for _, seed in long_rows[:6]:
        for alt in cluster_alternatives(seed):
            widest = alt.with_knobs(CLUSTER=max(knob_space(alt)["CLUSTER"]))
            for spec in (alt, widest, widest.with_knobs(ONLINE="wave")):
                r = render(spec)
                cubin = compile_cuda(r.source, "sm_90a", kernels=(r.entry,), cubin_dir=tmp_path)
                assert cubin.data[:4] == b"\x7fELF"
                compiled += 1
    assert compiled >= 4


def test_a_cached_cuda_spec_kernel_is_proved_from_its_cubin():
    _, seed = next(s for s in _seeds(8192) if cluster_alternatives(s[1]))
    (alt,) = cluster_alternatives(seed)
    r = render(alt)
    artifact = KernelArtifact(
        language="cuda", source=r.source, entry=r.entry, spec_json=alt.to_json(),
        binary=b"\x7fELF...", launch={"arch": "sm_90a"},
    )  # fmt: skip
    got = artifact_candidate(artifact)
    assert isinstance(got, SourceCandidate) and got.cubin == b"\x7fELF..."
    assert got.arch == "sm_90a"


def test_a_stored_cuda_spec_source_is_rebuilt_as_cuda(monkeypatch):
    _, seed = next(s for s in _seeds(8192) if cluster_alternatives(s[1]))
    (alt,) = cluster_alternatives(seed)
    r = render(alt)
    built = {}

    def fake_build(spec, rendered, **kwargs):
        built.update(spec=spec, rendered=rendered, **kwargs)
        return lambda *xs: []

    monkeypatch.setattr("kernelpro_backend.runtime.spec_kernel.build_kernel", fake_build)
    fn = candidate_module.load_kernel(
        SpecCandidate(alt.to_json(), r.source, r.entry),
        nn.Identity(),
        workdir=None,  # type: ignore[arg-type]
        cubin_dir=os.devnull,  # type: ignore[arg-type]
    )
    assert callable(fn)
    assert built["rendered"].language == "cuda" and built["rendered"].source == r.source
    assert built["cubin_dir"] == os.devnull


def test_three_long_rows_too_many_for_registers_are_held_in_shared_memory(tmp_path):
    """A bfloat16 RMSNorm backward over 512k columns keeps three rows (input, gradient,
    weight): at most 64 values a thread in registers would need more than a 16-CTA cluster's
    threads; the default holds them all in shared memory (HOLD=shared), 16 CTAs of 192 KiB;
    in float32 the rows exceed even the cluster's shared memory and no alternative is made."""
    from kernelpro_backend.codegen.cluster_rules import SHARED_LIMIT

    found = {}
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(1, 2**19, dtype=dtype, requires_grad=True)
        backward = [s for s in collect(RMSNorm(2**19).to(dtype), [x]) if s.graph[0] == "b"]
        found[dtype] = [a for sg in backward for a in cluster_alternatives(lower(sg))]
    assert found[torch.float32] == []
    (alt,) = found[torch.bfloat16]
    assert (alt.knob("HOLD"), alt.knob("CLUSTER"), alt.knob("VEC")) == ("shared", 16, 8)
    assert alt.knob("num_warps") == 4  # SHARED_FIRST_WARPS: a program holding several rows
    shape = cluster_shape(alt, dict(alt.knobs))
    assert len(shape.resident) == 3
    assert shape.shared_offsets()[1] == 3 * 2**19 // 16 * 2 <= SHARED_LIMIT
    if find_nvcc() is not None:
        from kernelpro_backend.runtime.cuda.compile import compile_cuda

        r = render(alt)
        cubin = compile_cuda(r.source, "sm_90a", kernels=(r.entry,), cubin_dir=tmp_path)
        assert cubin.data[:4] == b"\x7fELF"


def test_long_programs_holding_several_rows_start_in_shared_memory_at_four_warps(tmp_path):
    """Backwards that keep two rows or more (softmax: output and gradient; RMSNorm: input,
    gradient, weight) start HOLD=shared at 4 warps in the fewest CTAs that leave room for a
    second CTA on the SM, else for one; a forward holding one row keeps its split default."""
    from kernelpro_backend.codegen.cluster_rules import SHARED_LIMIT, resident_loads
    from kernelpro_backend.codegen.domain import rows_cols

    seen = set()
    for n in (65536, 262144):
        for sg, seed in _seeds(n, rows=1):
            for alt in cluster_alternatives(seed):
                shape = cluster_shape(alt, dict(alt.knobs))
                several = len(resident_loads(seed, rows_cols(seed)[1])) >= 2
                seen.add((sg.graph.split("_")[0], several))
                if not several:
                    assert alt.knob("HOLD") == "split" and alt.knob("num_warps") == 16
                    continue
                assert (alt.knob("HOLD"), alt.knob("num_warps")) == ("shared", 4)
                total = shape.shared_offsets()[1]
                smaller = alt.knob("CLUSTER") // 2
                if total <= SHARED_LIMIT // 2 and smaller >= 1:  # the fewest CTAs that leave room
                    fewer = cluster_shape(alt, dict(alt.knobs) | {"CLUSTER": smaller})
                    assert fewer.shared_offsets()[1] > SHARED_LIMIT // 2
                elif total > SHARED_LIMIT // 2:
                    assert alt.knob("CLUSTER") == 16
                if find_nvcc() is not None and ("compiled", n) not in seen:
                    from kernelpro_backend.runtime.cuda.compile import compile_cuda

                    r = render(alt)
                    cubin = compile_cuda(r.source, "sm_90a", kernels=(r.entry,), cubin_dir=tmp_path)
                    assert cubin.data[:4] == b"\x7fELF"
                    seen.add(("compiled", n))
    assert ("backward", True) in seen and ("forward", False) in seen


def _norm_seeds(module: nn.Module, shape: tuple[int, ...]) -> list:
    x = torch.randn(*shape, requires_grad=True)
    out = []
    for sg in collect(module, [x]):
        try:
            out.append((sg, lower(sg)))
        except Unsupported:  # a group norm backward piece broadcasting its result
            continue
    return [(sg, seed) for sg, seed in out if seed.template == "row_reduction"]


def test_norms_over_several_dims_run_row_resident(tmp_path):
    """GroupNorm (rows: sample x group; columns: the group's channels x pixels) and InstanceNorm
    (a batch norm over a leading dim of 1) get the row-resident alternative: the per-channel
    weight repeats along the row and is read an element at a time from the element's channel
    coordinate; a batch norm's reduction over (N, H, W) walks its rows with strides and is
    refused."""
    group = _norm_seeds(nn.GroupNorm(4, 32), (2, 32, 64, 64))
    forward = [seed for sg, seed in group if sg.graph.startswith("forward")]
    (alt,) = cluster_alternatives(max(forward, key=lambda s: len(s.loads)))
    source = render(alt).source
    assert "in0[8 * d1 + (((col / 4096LL) % 8LL))]" in source  # weight[group * 8 + channel]
    assert "kp_load<float, 4>(in2 + 131072 * d0 + 32768 * d1 + c0" in source  # x in order
    instance = _norm_seeds(nn.InstanceNorm2d(16), (2, 16, 128, 128))
    assert all(cluster_alternatives(seed) for _, seed in instance)
    assert {sg.graph.split("_")[0] for sg, _ in instance} == {"forward", "backward"}
    batch = _norm_seeds(nn.BatchNorm2d(32), (2, 32, 64, 64))
    refused = [s for _, s in batch if s.reduced and not cluster_alternatives(s)]
    assert refused
    with pytest.raises(IllegalSpec, match="walks the row with strides"):
        dataclasses.replace(refused[0], template="row_cluster", knobs=alt.knobs)
    if find_nvcc() is not None:
        from kernelpro_backend.runtime.cuda.compile import compile_cuda

        for spec in (alt, cluster_alternatives(instance[0][1])[0]):
            r = render(spec)
            cubin = compile_cuda(r.source, "sm_90a", kernels=(r.entry,), cubin_dir=tmp_path)
            assert cubin.data[:4] == b"\x7fELF"
