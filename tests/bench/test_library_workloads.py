"""The real-model corpus (bench/library/): each transformers model builds at "tiny", trains a step
as its users write it (labels=, the model's own loss), and the bench checks kernelpro's compile of
it against eager through the ModelOutput it returns. Without `transformers` the bench still
imports and the factories say which package is missing."""

import importlib.util
import subprocess
import sys

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from kernelpro_backend.bench.library import LIBRARY, LIBRARY_WORKLOADS
from kernelpro_backend.bench.modes import EAGER, KERNELPRO, Mode, make_modes
from kernelpro_backend.bench.results import OK, WRONG
from kernelpro_backend.bench.runner import RunConfig, run_workload
from kernelpro_backend.bench.workloads import (
    NAMED_ONLY,
    OP_WORKLOADS,
    TRAINING_WORKLOADS,
    WORKLOADS,
    workload_builders,
)

CPU = torch.device("cpu")
HF = [name for name in LIBRARY_WORKLOADS if name.startswith("hf_")]
TORCHVISION = [name for name in LIBRARY_WORKLOADS if name.startswith("tv_")]
HAS_TORCHVISION = importlib.util.find_spec("torchvision") is not None


def _config(*modes: Mode) -> RunConfig:
    return RunConfig([make_modes([EAGER])[0], *modes], cpu_reps=1, rounds=1, progress=print)


def test_the_corpus_is_registered_but_not_run_by_default():
    assert set(LIBRARY_WORKLOADS) >= {
        "hf_bert", "hf_t5", "hf_bart", "hf_whisper", "hf_qwen2", "hf_gpt_neox", "hf_vit",
        "hf_convnext", "hf_swin",
        "tv_resnet50", "tv_mobilenet_v3",
    }  # fmt: skip
    assert all(WORKLOADS[name] is LIBRARY[name] for name in LIBRARY_WORKLOADS)
    assert not set(LIBRARY_WORKLOADS) & set(TRAINING_WORKLOADS + OP_WORKLOADS)
    default = [name for name, _ in workload_builders([], None, CPU, None, "tiny")]
    assert default == [n for n in WORKLOADS if n not in NAMED_ONLY]
    assert set(LIBRARY) <= NAMED_ONLY
    named = [name for name, _ in workload_builders(["all", "hf_bert"], None, CPU, None, "tiny")]
    assert named == [*default, "hf_bert"]


def test_the_bench_imports_without_the_libraries():
    code = (
        "import sys; sys.modules['transformers'] = sys.modules['torchvision'] = None\n"
        "import torch\n"
        "from kernelpro_backend.bench.workloads import WORKLOADS\n"
        "try:\n"
        "    WORKLOADS['hf_qwen2'](torch.device('cpu'), None, 'tiny')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "needs the `transformers` package" in out.stdout
    assert "pip install -e '.[models]'" in out.stdout


@pytest.mark.parametrize("name", TORCHVISION)
def test_torchvision_models_name_the_missing_package(name):
    if HAS_TORCHVISION:
        w = LIBRARY[name](CPU, None, "tiny")
        model = w.fresh_model()
        w.loss_fn(model(*w.inputs)).backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    else:
        with pytest.raises(ImportError, match="needs the `torchvision` package"):
            LIBRARY[name](CPU, None, "tiny")


@pytest.mark.parametrize("name", HF)
def test_a_library_step_matches_eager_under_kernelpro(name):
    pytest.importorskip("transformers")
    w = LIBRARY[name](CPU, None, "tiny")
    assert w.training and w.dtype == torch.float32 and w.model.autocast is None  # CPU default
    model = w.fresh_model()
    out = model(*w.inputs)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)  # the model's own loss from labels=
    assert out.logits.shape[0] == w.inputs[0].shape[0]
    (kernelpro,) = make_modes([KERNELPRO], {"fallback": "eager"})[1:]
    result = run_workload(w, _config(kernelpro))
    statuses = {m.mode: (m.status, m.message) for m in result.modes}
    assert statuses == {EAGER: (OK, ""), KERNELPRO: (OK, "")}
    assert result.modes[1].kernels.endswith(tuple("0123456789"))  # kernelpro compiled the step


@pytest.mark.parametrize("name", ["hf_bart", "hf_whisper"])
def test_layerdrop_breaks_the_graph_before_every_layer(name):
    """What BART and Whisper are in the corpus for: under training, LayerDrop's draw
    (`torch.rand([]) < layerdrop`, the config's default 0.0) is a data-dependent branch before
    each of the 2+2 tiny layers, so Dynamo breaks the step into one graph per layer or more."""
    pytest.importorskip("transformers")
    w = LIBRARY[name](CPU, None, "tiny")
    explained = torch._dynamo.explain(w.fresh_model())(*w.inputs)
    reasons = {str(b.reason).partition("\n")[0] for b in explained.break_reasons}
    assert explained.graph_break_count >= 4
    assert reasons == {"Data-dependent branching"}


def test_the_check_walks_the_model_output():
    """A mode whose logits are off by 1% is caught: the comparison reaches into the ModelOutput
    (loss, logits), not only the loss."""
    pytest.importorskip("transformers")

    def off_by_one_percent(gm, example_inputs):
        def run(*args):
            outs = gm(*args)
            return [o * 1.01 if isinstance(o, torch.Tensor) and o.ndim == 3 else o for o in outs]

        return make_boxed_func(run)

    def identity(gm, example_inputs):
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=off_by_one_percent, bw_compiler=identity)
    result = run_workload(LIBRARY["hf_qwen2"](CPU, None, "tiny"), _config(Mode("off", backend)))
    off = result.modes[1]
    assert off.status == WRONG and "out[1]" in off.message  # out[1]: the logits


def test_bf16_autocast_step_runs_and_keeps_float32_weights():
    """Under autocast (the CUDA default; here CPU autocast) the weights stay float32, the logits
    come out in bf16 and the loss in float32, as in mixed-precision training."""
    pytest.importorskip("transformers")
    w = LIBRARY["hf_qwen2"](CPU, torch.bfloat16, "tiny")
    assert w.dtype == torch.bfloat16 and w.model.autocast == torch.bfloat16
    model = w.fresh_model()
    out = model(*w.inputs)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
    w.loss_fn(out).backward()
    assert all(p.dtype == torch.float32 and p.grad is not None for p in model.parameters())
