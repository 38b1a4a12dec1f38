"""The real-model corpus: training steps of library models (transformers, torchvision) as their
users write them, as bench workloads (issue 57: "[real-models]").

Owns: the registry `LIBRARY` of the corpus's factories, `(device, dtype, size) -> Workload`
like the built-in ones, in the order `LIBRARY_WORKLOADS` lists them.
Must not: import `transformers` or `torchvision` at import time (each factory imports its
library, and names it in an ImportError where it is missing: `pip install -e '.[models]'`), or
time, compile and compare anything.

    kernelpro bench --workload hf_qwen2 --size tiny --device cpu --modes eager,inductor
"""

from __future__ import annotations

from ..workload import WorkloadFactory
from .text import hf_bart, hf_bert, hf_gpt_neox, hf_qwen2, hf_t5, hf_whisper
from .torchvision_models import tv_efficientnet_b0, tv_mobilenet_v3, tv_resnet50
from .vision import hf_convnext, hf_swin, hf_vit

LIBRARY: dict[str, WorkloadFactory] = {
    f.__name__: f
    for f in (
        hf_bert, hf_t5, hf_bart, hf_whisper, hf_qwen2, hf_gpt_neox, hf_vit, hf_convnext, hf_swin,
        tv_resnet50, tv_mobilenet_v3, tv_efficientnet_b0,
    )
}  # fmt: skip
LIBRARY_WORKLOADS: tuple[str, ...] = tuple(LIBRARY)
