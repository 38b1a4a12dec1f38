"""The backend end to end on the CPU: training matches eager under both fallbacks."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from helpers import train

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession


@pytest.mark.parametrize("fallback", ["inductor", "eager"])
@pytest.mark.parametrize("name", sorted(examples.EXAMPLES))
def test_training_matches_eager(name, fallback):
    model_ref, (x,) = examples.EXAMPLES[name]("cpu")
    model, _ = examples.EXAMPLES[name]("cpu")
    ref_losses, ref_grads = train(model_ref, x)
    sessions: list[CompileSession] = []
    losses, grads = train(
        model,
        x,
        lambda m: torch.compile(
            m, backend=make_backend(sessions=sessions), options={"fallback": fallback}
        ),
    )
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    graphs = {r.graph for s in sessions for r in s.reports}
    assert graphs == {"forward", "backward"}  # training sees both graphs
    assert all(r.subgraphs > 0 and not r.replaced for s in sessions for r in s.reports)


def test_inference_graph_under_no_grad():
    model, (x,) = examples.mlp("cpu")
    sessions: list[CompileSession] = []
    compiled = torch.compile(model, backend=make_backend(sessions=sessions))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert [r.graph for s in sessions for r in s.reports] == ["inference"]


def test_registered_backend_by_name():
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="torch_dynamo_backends")}
    assert "kernelpro" in names
    assert "kernelpro" in torch._dynamo.list_backends()
    model, (x,) = examples.mlp("cpu")
    with torch.no_grad():
        out = torch.compile(model, backend="kernelpro", options={"fallback": "eager"})(x)
        torch.testing.assert_close(out, model(x))


def test_mode_is_accepted():
    model, (x,) = examples.mlp("cpu")
    with torch.no_grad():
        out = torch.compile(model, backend="kernelpro", mode="max-autotune-no-cudagraphs")(x)
        torch.testing.assert_close(out, model(x))


@pytest.mark.parametrize(
    ("mode", "options", "graphs"),
    [
        (None, None, None),
        (None, {"cuda_graphs": True}, True),
        ("reduce-overhead", None, True),
        ("reduce-overhead", {"cuda_graphs": False}, True),  # the mode's own patches stand
        (None, {"inductor_mode": "reduce-overhead", "search": "off"}, True),  # mode and options
    ],
)
def test_cuda_graphs_reach_inductor_from_the_option_or_the_mode(monkeypatch, mode, options, graphs):
    import torch._inductor.compile_fx as compile_fx

    patches = []
    real = compile_fx.compile_fx

    def recording(*args, **kwargs):
        patches.append(kwargs.get("config_patches"))
        return real(*args, **{**kwargs, "config_patches": None})  # compiled as on the CPU

    monkeypatch.setattr(compile_fx, "compile_fx", recording)
    model, (x,) = examples.mlp("cpu")
    backend = make_backend()
    compiled = torch.compile(model, backend=lambda gm, ex: backend(gm, ex, mode, options))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    assert [(p or {}).get("triton.cudagraphs") for p in patches] == [graphs]


def test_bad_option_fails_loudly():
    model, (x,) = examples.mlp("cpu")
    with pytest.raises(Exception, match="unknown kernelpro option"):
        torch.compile(model, backend="kernelpro", options={"fallbak": "eager"})(x)


def test_no_cuda_is_logged_once(caplog):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only message")
    from kernelpro_backend.backend import _warn_no_cuda_once

    _warn_no_cuda_once.cache_clear()
    model, (x,) = examples.mlp("cpu")
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        for _ in range(2):
            torch._dynamo.reset()
            torch.compile(model, backend="kernelpro", options={"fallback": "eager"})(x)
    messages = [
        r.message for r in caplog.records if "needs" in r.message or "no CUDA GPU" in r.message
    ]
    assert len(messages) == 1 and "fallback only" in messages[0]


@pytest.mark.parametrize("how", ["dynamic", "mark_dynamic"])
def test_dynamic_shapes_fall_back(how, caplog):
    model, (x,) = examples.mlp("cpu")
    sessions: list[CompileSession] = []
    backend = make_backend(sessions=sessions)
    kwargs = {"dynamic": True} if how == "dynamic" else {}
    compiled = torch.compile(model, backend=backend, options={"fallback": "eager"}, **kwargs)
    with caplog.at_level(logging.INFO, logger="kernelpro"):
        for batch in (5, 7, 9):
            xb = torch.randn(batch, 64)
            if how == "mark_dynamic":
                torch._dynamo.mark_dynamic(xb, 0)
            torch.testing.assert_close(compiled(xb), model(xb))
            compiled(xb).sum().backward()
    symbolic = sum(r.symbolic for s in sessions for r in s.reports)
    assert symbolic > 0
    assert any("symbolic sizes" in r.message for r in caplog.records)


def test_eager_fallback_compiles_max_pool_in_a_fresh_process():
    """torch's Inductor decomposition of max_pool2d reads `torch._inductor.lowering`, which only
    Inductor itself imports: a fresh process compiling a conv net with the eager fallback failed
    with "module 'torch._inductor' has no attribute 'lowering'" (torch 2.13)."""
    import subprocess
    import sys

    code = (
        "import torch, torch.nn.functional as F\n"
        "from kernelpro_backend import make_backend\n"
        "f = torch.compile(lambda x: F.max_pool2d(x, 2).sum(), "
        "backend=make_backend(), options={'fallback': 'eager', 'search': 'off'})\n"
        "x = torch.randn(2, 3, 8, 8, requires_grad=True)\n"
        "f(x).backward()\n"
        "print('ok', x.grad.shape)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-2000:]


@pytest.mark.parametrize("which", ["gpt", "lm_head_bf16"])
def test_both_fallbacks_cut_the_same_subgraphs_so_a_cache_serves_either(which):
    """The same subgraphs (texts, hence cache keys) under fallback="eager" and "inductor":
    Inductor's joint-graph passes rewrite graphs before partitioning, and the eager fallback
    runs them too — a cache warmed under one fallback serves the other."""
    from kernelpro_backend.bench import models

    def cut(fallback):
        torch.manual_seed(0)
        if which == "gpt":
            model = models.HandwrittenGPT(256, 64, 2, 1, 32)
            inputs = (torch.randint(0, 256, (2, 32)), torch.randint(0, 256, (2, 32)))
        else:
            model = models.LMHeadLoss(64, 1000).bfloat16()
            inputs = (torch.randn(128, 64, dtype=torch.bfloat16), torch.randint(0, 1000, (128,)))
        found = []
        torch._dynamo.reset()
        backend = make_backend(observer=lambda kind, sgs: found.extend((kind, s.text) for s in sgs))
        compiled = torch.compile(model, backend=backend, options={"fallback": fallback, "search": "off"})  # fmt: skip
        compiled(*inputs).backward()
        return found

    eager, inductor = cut("eager"), cut("inductor")
    assert eager and {k for k, _ in eager} == {"forward", "backward"}
    assert eager == inductor


def test_cuda_graphs_under_the_eager_fallback_say_they_do_nothing(caplog):
    from kernelpro_backend import backend as backend_module

    backend_module._warn_graphs_without_inductor_once.cache_clear()
    model, (x,) = examples.mlp("cpu")
    opts = {"fallback": "eager", "cuda_graphs": True}
    with caplog.at_level(logging.WARNING, logger="kernelpro"), torch.no_grad():
        torch.testing.assert_close(
            torch.compile(model, backend=make_backend(), options=opts)(x), model(x)
        )
    assert "cuda_graphs needs the Inductor fallback" in caplog.text


def test_each_compiled_graph_logs_one_info_line_with_what_replaced_what(caplog):
    """Subgraphs, how many were replaced and by which kernel, and the torch-level rewrites made
    on the graph before it was cut: one INFO line per compiled graph."""
    from kernelpro_backend.bench.workloads import mini_gpt
    from kernelpro_backend.rewrite.providers import ReferenceProvider

    w = mini_gpt(torch.device("cpu"), torch.float32, "tiny")
    provider = ReferenceProvider(kinds=["gemm"])
    compiled = torch.compile(
        w.model, backend=make_backend(provider), options={"fallback": "eager", "in_context": False}
    )
    with caplog.at_level(logging.INFO, logger="kernelpro"):
        compiled(*w.inputs).sum().backward()
    lines = [r.getMessage() for r in caplog.records if " graph: " in r.getMessage()]
    assert [line.split(" graph:")[0] for line in lines] == ["forward", "backward"], lines
    forward = lines[0]
    replaced = int(re.search(r"subgraphs, (\d+) replaced", forward).group(1))
    assert replaced == sum(sg.graph == "forward" for sg in provider.provided) > 0
    first = provider.provided[0]
    assert f"{first.pattern} by reference-{first.key.short()}" in forward, forward
    assert forward.endswith("; torch-level rewrites: attention 2, linear_cross_entropy 1"), forward
