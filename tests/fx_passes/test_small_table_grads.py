"""A small table's accumulated gradient as a one-hot GEMM: the backward graphs AOTAutograd
makes for embeddings with few rows and many lookups (T5's position buckets, token types),
rewritten on the CPU (the pass's device list opened to it), compiled by Inductor, and their
gradients checked against eager's."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch._inductor.compile_fx import compile_fx_inner
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

import kernelpro_backend.backend as backend_module
from kernelpro_backend import make_backend
from kernelpro_backend.fx_passes import small_table_grads
from kernelpro_backend.fx_passes.small_table_grads import one_hot_table_grads
from kernelpro_backend.rewrite.providers import NullProvider

aten = torch.ops.aten
PUTS = (aten._unsafe_masked_index_put_accumulate.default,)


def puts(gm: torch.fx.GraphModule) -> int:
    return sum(n.target in PUTS for n in gm.graph.nodes)


def grads_through(
    fn: Callable[..., torch.Tensor], *args: torch.Tensor
) -> tuple[list[torch.Tensor], list[int]]:
    """`fn`'s gradients with its backward graph rewritten for the CPU and compiled by Inductor;
    with how many accumulates the graph had before and after."""
    counts: list[int] = []

    def backward(gm: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        counts.append(puts(gm))
        counts.append(one_hot_table_grads(gm, devices=("cpu",)))
        counts.append(puts(gm))
        return compile_fx_inner(gm, inputs)

    def forward(gm: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        return compile_fx_inner(gm, inputs)

    backend = aot_autograd(
        fw_compiler=forward, bw_compiler=backward, decompositions=select_decomp_table()
    )
    torch._dynamo.reset()
    leaves = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
    torch.compile(fn, backend=backend)(*leaves).backward()
    return [a.grad for a in leaves if a.grad is not None], counts


def eager_grads(fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> list[torch.Tensor]:
    leaves = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
    fn(*leaves).backward()
    return [a.grad for a in leaves if a.grad is not None]


def position_bias(weight: torch.Tensor, buckets: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """T5's relative-position bias: one row of heads for each (query, key) pair's bucket."""
    return (F.embedding(buckets, weight).permute(2, 0, 1) * g).sum()


def test_position_bias_gradient_matches_eager() -> None:
    torch.manual_seed(0)
    weight, g = torch.randn(32, 4), torch.randn(4, 128, 128)
    buckets = torch.randint(0, 32, (128, 128))
    got, counts = grads_through(position_bias, weight, buckets, g)
    want = eager_grads(position_bias, weight, buckets, g)
    assert counts == [1, 1, 0]
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got[1], want[1])


def test_padding_row_gets_no_gradient() -> None:
    torch.manual_seed(1)
    weight, g = torch.randn(6, 8), torch.randn(4096, 8)
    ids = torch.randint(0, 6, (4096,))

    def fn(weight: torch.Tensor, ids: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return (F.embedding(ids, weight, padding_idx=3) * g).sum()

    got, counts = grads_through(fn, weight, ids, g)
    want = eager_grads(fn, weight, ids, g)
    assert counts == [1, 1, 0]
    assert torch.equal(got[0][3], torch.zeros(8))
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-4)


def test_bfloat16_sums_as_exactly_as_float32_accumulation_allows() -> None:
    torch.manual_seed(2)
    weight = torch.randn(2, 64, dtype=torch.bfloat16)
    g = torch.randn(2048, 64, dtype=torch.bfloat16)
    ids = torch.randint(0, 2, (2048,))
    got, counts = grads_through(lambda w, i, g: (F.embedding(i, w) * g).sum(), weight, ids, g)
    exact = torch.zeros(2, 64, dtype=torch.float64).index_add_(0, ids, g.double())
    assert counts == [1, 1, 0] and got[0].dtype == torch.bfloat16
    torch.testing.assert_close(got[0].double(), exact, rtol=1e-2, atol=1e-2)


def put_graph(rows: int, hits: int) -> tuple[Any, list[Any]]:
    """`_unsafe_masked_index_put_accumulate` into `zeros(rows, 3)` as Inductor receives it,
    with indices from -rows to rows - 1 (negative ones wrap) and a third of them masked out."""

    def fn(mask: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        table = torch.zeros(rows, 3)
        return aten._unsafe_masked_index_put_accumulate(table, mask, [index], values)

    index = torch.randint(-rows, rows, (hits,))
    mask = (torch.rand(hits) > 1 / 3).unsqueeze(-1)
    values = torch.randn(hits, 3)
    gm = make_fx(fn, decomposition_table=select_decomp_table(), tracing_mode="fake")(
        mask, index, values
    )
    return gm, [mask, index, values]


def test_masked_accumulate_with_negative_indices() -> None:
    torch.manual_seed(3)
    gm, args = put_graph(8, 8 * 256)
    want = gm(*args)
    assert puts(gm) == 1 and one_hot_table_grads(gm, devices=("cpu",)) == 1 and puts(gm) == 0
    torch.testing.assert_close(gm(*args), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("rows", "hits", "devices"),
    [
        (100, 100 * 256, ("cpu",)),  # too many rows for a one-hot
        (8, 8 * 255, ("cpu",)),  # too few hits a row to contend
        (8, 8 * 256, ("cuda",)),  # a device not named
    ],
)
def test_left_as_written(rows: int, hits: int, devices: tuple[str, ...]) -> None:
    gm, _ = put_graph(rows, hits)
    assert one_hot_table_grads(gm, devices=devices) == 0
    assert puts(gm) == 1


def test_float32_values_are_split_for_a_tf32_gemm() -> None:
    """With TF32 allowed the pass still applies: the values go in as their TF32-exact high part
    and the remainder (bit views in the graph), and the sums come out as with IEEE."""
    torch.manual_seed(4)
    gm, args = put_graph(8, 8 * 256)
    want = gm(*args)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        assert one_hot_table_grads(gm, devices=("cpu",)) == 1
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    casts = [n for n in gm.graph.nodes if n.target is aten.view.dtype]
    assert [n.args[1] for n in casts] == [torch.int32, torch.float32]
    torch.testing.assert_close(gm(*args), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("model", ["t5", "bert"])
def test_library_models_train_as_eager_with_the_one_hot(model: str, monkeypatch) -> None:
    """T5's position buckets and BERT's token types, as `transformers` builds them (tiny
    configs, float32), through the backend with the pass opened to the CPU and any hit count:
    each small table's gradient becomes the one-hot GEMM and every gradient follows eager's."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(small_table_grads, "MIN_HITS", 1)
    opened = functools.partial(one_hot_table_grads, devices=("cpu",))
    monkeypatch.setattr(backend_module, "one_hot_table_grads", opened)
    torch.manual_seed(0)
    ids = torch.randint(3, 200, (2, 24))
    if model == "t5":
        config = transformers.T5Config(
            vocab_size=200, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
            relative_attention_num_buckets=8, dropout_rate=0.0, decoder_start_token_id=0,
        )  # fmt: skip
        net = transformers.T5ForConditionalGeneration(config)
        inputs = dict(input_ids=ids, labels=ids[:, :12].contiguous())
        tables = 2  # the encoder's and the decoder's position biases
    else:
        config = transformers.BertConfig(
            vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
            intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        net = transformers.BertForMaskedLM(config)
        inputs = dict(input_ids=ids, labels=ids)
        tables = 1  # token types; positions (512 rows) and words have too many rows
    net.train()
    compiled_net = copy.deepcopy(net)
    net(**inputs).loss.backward()
    sessions: list = []
    torch._dynamo.reset()
    backend = make_backend(provider=NullProvider(), sessions=sessions)
    torch.compile(compiled_net, backend=backend)(**inputs).loss.backward()
    made = sum(s.rewrites.get(small_table_grads.NAME, 0) for s in sessions)
    assert made >= tables, made
    for (name, a), b in zip(net.named_parameters(), compiled_net.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)
