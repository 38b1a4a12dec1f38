"""GPU: inlined kernels compiled by Inductor into its own generated code, numerics as eager."""

from __future__ import annotations

import pytest
import torch
from helpers import train

from kernelpro_backend import examples, make_backend
from kernelpro_backend.backend import CompileSession
from kernelpro_backend.codegen import Unsupported, build, seed_configs
from kernelpro_backend.fx_passes import Subgraph
from kernelpro_backend.lowering import lower

pytestmark = pytest.mark.gpu


class RowwiseSpecProvider:
    def find(self, subgraph: Subgraph):
        if subgraph.kind not in ("reduction", "pointwise"):
            return None
        try:
            return build(lower(subgraph))
        except Unsupported:
            return None


@pytest.mark.parametrize("launch", ["inline", "op"])
def test_transformer_block_trains_with_inlined_kernels(launch):
    from torch._inductor.utils import run_and_get_code

    model_ref, (x,) = examples.transformer_block("cuda")
    model, _ = examples.transformer_block("cuda")
    ref_losses, ref_grads = train(model_ref, x)
    sessions: list[CompileSession] = []
    backend = make_backend(provider=RowwiseSpecProvider(), sessions=sessions)
    compiled = torch.compile(model, backend=backend, options={"launch": launch})
    (losses, grads), code = run_and_get_code(lambda: train(model, x, lambda m: compiled))
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    reports = [r for s in sessions for r in s.reports]
    replaced = sum(len(r.replaced) for r in reports)
    inlined = sum(len(r.inlined) for r in reports)
    assert replaced >= 4
    source = "\n".join(code)
    if launch == "inline":
        assert inlined == replaced
        assert "kernelpro.launch" not in source
    else:
        assert inlined == 0
        assert "kernelpro.launch" in source


class ConvSpecProvider:
    """Every convolution by the conv template's first seed (which packs its weight into a
    scratch buffer first): correct and inlined, whatever its speed."""

    def find(self, subgraph: Subgraph):
        if subgraph.kind != "conv":
            return None
        try:
            return build(seed_configs(lower(subgraph))[0])
        except Unsupported:
            return None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_conv_template_kernel_inlines_and_matches_eager(dtype):
    """The conv template's launches and its scratch allocation go into Inductor's code (no
    `kernelpro.launch`), and the graph computes eager's convolution within TF32's / bf16's
    tolerance (the template rounds to tf32 where cuDNN may, PyTorch's default for convs)."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).cuda().to(dtype)
    x = torch.randn(8, 64, 14, 14, device="cuda", dtype=dtype)
    sessions: list[CompileSession] = []
    backend = make_backend(provider=ConvSpecProvider(), sessions=sessions)
    compiled = torch.compile(conv, backend=backend, options={"in_context": False})
    with torch.no_grad():
        got, code = run_and_get_code(lambda: compiled(x))
        want = conv(x)
    reports = [r for s in sessions for r in s.reports]
    assert sum(len(r.replaced) for r in reports) == 1, reports
    assert sum(len(r.inlined) for r in reports) == 1, reports
    assert "kernelpro.launch" not in "\n".join(code)
    tol = 2e-2 if dtype == torch.bfloat16 else 5e-3  # tf32's 10-bit mantissa over K = 576
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


class OncePerKeyProvider(RowwiseSpecProvider):
    """One kernel object per subgraph key, as the finder serves a cached kernel."""

    def __init__(self) -> None:
        self.built: dict[str, object] = {}
        self.sites = 0

    def find(self, subgraph: Subgraph):
        key = repr(subgraph.key)
        if key not in self.built:
            self.built[key] = super().find(subgraph)
        self.sites += self.built[key] is not None
        return self.built[key]


def test_a_kernel_inlined_at_many_sites_is_analysed_once_per_signature(monkeypatch):
    """torch generates a kernel's TTIR for each access analysis; rewrite/access_memo.py keeps
    that to one per kernelpro kernel and argument signature, however many sites it serves,
    and the graph still trains as eager does."""
    from torch._higher_order_ops import triton_kernel_wrap as wrap

    from kernelpro_backend.rewrite import access_memo

    blocks = 6

    def model_of():
        torch.manual_seed(0)
        layers = [
            torch.nn.Sequential(torch.nn.LayerNorm(256), torch.nn.GELU()) for _ in range(blocks)
        ]
        return torch.nn.Sequential(*layers).cuda()

    x = torch.randn(64, 256, device="cuda")
    ref_losses, ref_grads = train(model_of(), x)
    access_memo.uninstall()
    generated = []
    original = wrap.generate_ttir
    monkeypatch.setattr(
        wrap, "generate_ttir", lambda *a, **k: generated.append(1) or original(*a, **k)
    )
    torch._dynamo.reset()
    provider = OncePerKeyProvider()
    model = model_of()
    compiled = torch.compile(
        model, backend=make_backend(provider=provider), options={"launch": "inline"}
    )
    losses, grads = train(model, x, lambda m: compiled)
    torch.testing.assert_close(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    kernels = sum(k is not None for k in provider.built.values())
    assert provider.sites >= blocks  # each kernel served at several sites
    # one analysis per kernel for functionalization's fake tensors, one for Inductor's buffers
    assert 0 < len(generated) <= 2 * kernels < provider.sites * 2, (
        len(generated),
        kernels,
        provider.sites,
    )
