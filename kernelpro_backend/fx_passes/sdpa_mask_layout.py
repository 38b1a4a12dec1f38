"""An SDPA mask whose last dimension is strided is made contiguous, so CUDA's fused attention
kernels may take it.

On CUDA every fused SDPA kernel (flash, memory-efficient, cuDNN) requires the mask's last
dimension to have stride 1 (`check_last_dim_stride_equals_1_dense` in ATen's sdp_utils; the CPU
kernels do not). A mask that is a permuted view fails it and SDPA runs its math path, which
upcasts bf16/fp16 to float32: two batched float32 matmuls and a softmax on CUDA cores, forward
and backward. Hugging Face's T5 family builds its learned position bias as
`embedding(buckets).permute([2, 0, 1]).unsqueeze(0)`, [1, H, Sq, Sk] with last-dimension stride
H, and passes it as the mask of every self-attention: under Inductor on an H100 (T5-base, bf16
autocast, 2026-12-07) its attention ran as float32 `bmm`s on CUDA cores (cuBLAS
`sm80_xmma_gemm_f32f32...ffma`), about a third of the step's GPU time.

Copying the mask contiguous (one read and write of the bias per call; its gradient flows back
through the copy) makes the memory-efficient kernel eligible, whose bias-reading forward and
backward kernelpro's attention templates then replace. Exact: the same values, a different
layout. Made only on the devices named (CUDA), where the stride is what refuses the fused
kernels; each mask copied gets a note.

Owns: `contiguous_sdpa_masks(gm, notes, devices) -> int` (masks made contiguous).
Must not: change a mask's values (sdpa_mask.py drops or simplifies constant ones first).
"""

from __future__ import annotations

import torch
import torch.fx as fx

from .sdpa_mask import SDPA_CALLS
from .torch_level import ChainNote, arg, example_value, finish_rewrite, note

NAME = "attention_mask_layout"


def contiguous_sdpa_masks(
    gm: fx.GraphModule, notes: list[ChainNote] | None, devices: tuple[str, ...] = ("cuda",)
) -> int:
    graph = gm.graph
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in SDPA_CALLS:
            continue
        mask = arg(node, 3, "attn_mask")
        value = example_value(mask)
        if not isinstance(mask, fx.Node) or not isinstance(value, torch.Tensor):
            continue
        if value.device.type not in devices:
            continue
        if value.dim() == 0:
            continue
        size, stride = value.shape[-1], value.stride(-1)
        if not isinstance(size, int) or not isinstance(stride, int):
            continue  # symbolic: no guard is added for a layout
        if size <= 1 or stride == 1:
            continue
        with graph.inserting_before(node):
            dense = graph.call_method("contiguous", (mask,))
        if "stack_trace" in node.meta:
            dense.meta["stack_trace"] = node.meta["stack_trace"]
        node.replace_input_with(mask, dense)
        note(
            notes, NAME, node,
            f"mask {tuple(value.shape)} with last-dimension stride {value.stride(-1)} copied "
            "contiguous: CUDA's fused attention kernels need stride 1 (else the float32 math path)",
            None,
        )  # fmt: skip
        done += 1
    return finish_rewrite(gm, done, "strided SDPA mask(s) made contiguous")
