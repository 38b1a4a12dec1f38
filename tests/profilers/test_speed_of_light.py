"""FLOP and byte counts of real subgraphs, the SOL time, and the ceilings cache."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from kernelpro_backend.backend import make_backend
from kernelpro_backend.fx_passes import subgraph as subgraph_module
from kernelpro_backend.fx_passes.group import Group
from kernelpro_backend.fx_passes.ops import op_name
from kernelpro_backend.fx_passes.split import split_at
from kernelpro_backend.fx_passes.subgraph import subgraph_of_group
from kernelpro_backend.profilers import ceilings as ceilings_mod
from kernelpro_backend.profilers.ceilings import Ceilings
from kernelpro_backend.profilers.speed_of_light import (
    SpeedOfLight,
    count_work,
    fewest_bytes,
    subgraph_cost,
)

FAKE = Ceilings(
    device_name="Fake GPU",
    dram_bytes_per_s=1e12,
    fp32_flops_per_s=50e12,
    tf32_flops_per_s=400e12,
    bf16_flops_per_s=800e12,
    l2_bytes=50 * 2**20,
)


def only_subgraph(fn, *args, kind=None):
    torch._dynamo.reset()
    store = []
    backend = make_backend(observer=lambda k, sgs: store.extend(sgs))
    torch.compile(fn, backend=backend, options={"fallback": "eager", "search": "off"})(*args)
    found = [s for s in store if kind is None or s.kind == kind]
    assert len(found) == 1, [s.pattern for s in store]
    return found[0]


def test_addmm_relu_flops_and_bytes():
    sg = only_subgraph(
        lambda a, b, c: torch.addmm(c, a, b).relu(),
        torch.randn(64, 32),
        torch.randn(32, 16),
        torch.randn(16),
    )
    flops, nbytes, sol = SpeedOfLight.for_subgraph(sg, FAKE)
    assert flops == 2 * 64 * 32 * 16 + 64 * 16 + 64 * 16  # GEMM + bias + relu
    assert nbytes == 4 * (64 * 32 + 32 * 16 + 16 + 64 * 16)
    compute = (2 * 64 * 32 * 16) / FAKE.fp32_flops_per_s + (2 * 64 * 16) / FAKE.fp32_flops_per_s
    assert sol == pytest.approx(max(compute, nbytes / 1e12) * 1e3)


def test_bmm_flops():
    sg = only_subgraph(torch.bmm, torch.randn(3, 8, 5), torch.randn(3, 5, 7))
    assert SpeedOfLight.work(sg).tensor_flops == 2 * 3 * 8 * 5 * 7


def test_conv_flops():
    x, w = torch.randn(2, 3, 10, 10), torch.randn(4, 3, 3, 3)
    sg = only_subgraph(lambda x, w: F.conv2d(x, w, padding=1), x, w, kind="conv")
    assert SpeedOfLight.work(sg).tensor_flops == 2 * (2 * 4 * 10 * 10) * 3 * 9


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_depthwise_convs_math_is_bound_by_the_fma_units_not_the_tensor_cores(dtype):
    """One input channel a group: 7x7 products an output and no channel sum, so no tensor-core
    roof; float32 FMAs at the FP32 rate, 16-bit ones packed two-wide at twice it."""
    x, w = torch.randn(2, 8, 14, 14, dtype=dtype), torch.randn(8, 1, 7, 7, dtype=dtype)
    sg = only_subgraph(lambda x, w: F.conv2d(x, w, padding=3, groups=8), x, w, kind="conv")
    work = SpeedOfLight.work(sg)
    flops = 2 * (2 * 8 * 14 * 14) * 49
    assert work.tensor_flops == 0 and work.flops == flops
    rate = FAKE.fp32_flops_per_s * (2 if dtype == torch.bfloat16 else 1)
    assert work.compute_s(FAKE, "ieee") == pytest.approx(flops / rate)
    compute_ms = flops / rate * 1e3
    assert SpeedOfLight.time_ms(work, FAKE, "ieee") == pytest.approx(
        max(compute_ms, work.bytes / FAKE.dram_bytes_per_s * 1e3)
    )


def test_a_grouped_conv_with_channels_in_its_groups_stays_on_the_tensor_cores():
    x, w = torch.randn(2, 8, 10, 10), torch.randn(8, 4, 3, 3)
    sg = only_subgraph(lambda x, w: F.conv2d(x, w, padding=1, groups=2), x, w, kind="conv")
    assert SpeedOfLight.work(sg).tensor_flops == 2 * (2 * 8 * 10 * 10) * 4 * 9


@pytest.mark.parametrize("causal", [False, True])
def test_attention_flops(causal):
    # The partitioner finds no attention subgraph on CPU today: count the aten graph directly.
    q = torch.randn(2, 4, 16, 8)
    gm = make_fx(
        lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, is_causal=causal
        )[0],
        tracing_mode="fake",
    )(q, q.clone(), q.clone())
    work = count_work(list(gm.graph.nodes), [], [])
    assert work.tensor_flops == 4 * 2 * 4 * 16 * 16 * 8 / (2 if causal else 1)


def test_softmax_counts_reductions_per_input_element_and_pointwise_per_output():
    sg = only_subgraph(lambda x: torch.softmax(x, -1), torch.randn(8, 40))
    work = SpeedOfLight.work(sg)
    assert work.tensor_flops == 0
    # amax and sum read 320 elements each; sub, exp and div write 320 each
    assert work.other_flops == 5 * 320
    assert work.bytes == 2 * 320 * 4


def test_expanded_input_is_read_once():
    assert fewest_bytes([((8, 40), (0, 1), "float32")], [((8, 40), (40, 1), "bfloat16")]) == (
        40 * 4 + 320 * 2
    )


def _logits_then_float(a, b):
    logits = (a @ b).view(4, 16, 30)  # BERT's MLM head: returned, and upcast for the loss
    return logits, logits.view(-1, 30).float()


@pytest.mark.parametrize("kept", [False, True])
def test_output_viewing_an_input_is_not_written(kept, monkeypatch):
    # The GEMM's group split below the mm (as the lowering splits it), its pointwise part: the
    # bf16 logits returned as a view of the mm's output, and their float32 copy. Subgraphs leave
    # such a view outside (fx_passes/subgraph.py); where one keeps it (`kept`), no kernel writes
    # it (the reference returns it, validation allows the alias): 1 read + 1 write either way.
    if kept:
        monkeypatch.setattr(subgraph_module, "_outside_views", lambda nodes: set())
    a, b = torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(32, 30, dtype=torch.bfloat16)
    whole = only_subgraph(_logits_then_float, a, b, kind="gemm")
    mm = next(n for n in whole.nodes if op_name(n) == "aten::mm")
    part = split_at(whole, mm)[1]
    assert part.kind == "pointwise" and len(part.outputs) == (2 if kept else 1)
    assert SpeedOfLight.work(part).bytes == 64 * 30 * 2 + 64 * 30 * 4
    # The whole group writes the logits (the mm is no input there): counted as before.
    assert SpeedOfLight.work(whole).bytes == 2 * (64 * 32 + 32 * 30) + 64 * 30 * (2 + 4)


def _group(fn, *args, members):
    """The subgraph of the make_fx graph of `fn` whose members are the nodes `members` names."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and members(n)]
    return subgraph_of_group(Group(nodes=nodes, mask=0), "forward", "ieee")


def test_view_of_another_output_is_written_once():
    def fn(x):
        y = x.relu()
        return y, y.t(), y.sum()  # the sum only keeps y and its view outputs

    sg = _group(fn, torch.randn(8, 40), members=lambda n: op_name(n) != "aten::sum")
    assert len(sg.outputs) == 2
    assert SpeedOfLight.work(sg).bytes == 320 * 4 + 320 * 4


def test_input_only_viewed_is_not_read(monkeypatch):
    def fn(x, y):
        return x.view(40, 8), y.exp()

    # a subgraph that keeps the view (fx_passes/subgraph.py leaves it outside)
    monkeypatch.setattr(subgraph_module, "_outside_views", lambda nodes: set())
    sg = _group(fn, torch.randn(8, 40), torch.randn(16), members=lambda n: True)
    assert len(sg.inputs) == 2 and len(sg.outputs) == 2
    assert SpeedOfLight.work(sg).bytes == 16 * 4 + 16 * 4


def test_disjoint_views_of_a_value_are_each_written():
    # Not a view of an output or input: both pieces are written, as the reference writes them
    # (counting one would let a kernel skip the other under the bound).
    def fn(x):
        y = x * 2
        return y[:, :10], y[:, 10:]

    sg = _group(fn, torch.randn(8, 40), members=lambda n: True)
    assert SpeedOfLight.work(sg).bytes == 320 * 4 + 80 * 4 + 240 * 4


def test_view_reaching_past_its_base_output_is_written():
    # An as_strided of an output that addresses more of the storage than that output holds.
    def fn(x):
        y = x * 2
        head = y[:, :10]
        return head, head.as_strided((8, 40), (40, 1))

    sg = _group(fn, torch.randn(8, 40), members=lambda n: True)
    assert len(sg.outputs) == 2
    assert SpeedOfLight.work(sg).bytes == 320 * 4 + 80 * 4 + 320 * 4


def test_subgraph_cost_leaves_out_an_output_viewing_an_input():
    x = torch.randn(64, 30, dtype=torch.bfloat16)
    flops, nbytes = subgraph_cost(lambda x: (x.view(4, 16, 30), x.float()), [x])
    assert (flops, nbytes) == (64 * 30, 64 * 30 * 2 + 64 * 30 * 4)


@pytest.mark.parametrize(
    "dtype,precision,expected",
    [
        ("float32", "ieee", 50e12),
        ("float32", "tf32", 400e12),
        ("float32", "tf32x3", 400e12 / 3),
        ("bfloat16", "ieee", 800e12),
        ("float16", "tf32", 800e12),
    ],
)
def test_compute_roof_follows_dtype_and_precision(dtype, precision, expected):
    assert FAKE.peak_flops_per_s(dtype, precision, tensor_op=True) == expected
    assert FAKE.peak_flops_per_s(dtype, precision, tensor_op=False) == 50e12


def test_ceilings_are_measured_once_and_cached(tmp_path, monkeypatch):
    calls = []

    def fake_measure(device):
        calls.append(device)
        return FAKE

    monkeypatch.setattr(ceilings_mod, "measure", fake_measure)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU 80GB/HBM3")
    first = Ceilings.load_or_measure("cuda", cache_dir=tmp_path)
    second = Ceilings.load_or_measure("cuda", cache_dir=tmp_path)
    assert first == second == FAKE and len(calls) == 1
    path = tmp_path / "ceilings-Fake-GPU-80GB-HBM3.json"
    assert json.loads(path.read_text())["dram_bytes_per_s"] == 1e12


def test_corrupt_ceilings_file_is_remeasured(tmp_path, monkeypatch):
    monkeypatch.setattr(ceilings_mod, "measure", lambda device: FAKE)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    Ceilings.cache_path("Fake GPU", tmp_path).write_text('{"schema": 99}')
    assert Ceilings.load_or_measure("cuda", cache_dir=tmp_path) == FAKE


def test_ceilings_refuse_cpu():
    with pytest.raises(ValueError, match="CUDA"):
        Ceilings.load_or_measure("cpu")
