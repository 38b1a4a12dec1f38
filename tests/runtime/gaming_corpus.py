"""Candidate kernels that try to game the evaluator, and one honest kernel, as source text.

All compute (or pretend to compute) `relu(x * y + 1.0)` on two float32 tensors of the same
shape: the subgraph `pointwise_subgraph` in conftest.py. Each gaming case names the status and
a phrase of the message the evaluator must reject it with. Shared by the CPU tests (Triton
interpreter) and the GPU tests (test_runtime_gpu.py).
"""

from __future__ import annotations

import dataclasses

HEADER = """
import torch
import triton
import triton.language as tl


@triton.jit
def fused(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, LIMIT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < LIMIT
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * y + 1.0, 0.0), mask=mask)


def launch(x, y, out, limit=None):
    n = x.numel()
    fused[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256, LIMIT=n if limit is None else limit)
    return out
"""

HONEST = (
    HEADER
    + """
def entry(x, y):
    return [launch(x, y, torch.empty_like(x))]
"""
)


@dataclasses.dataclass(frozen=True)
class GamingCase:
    name: str
    source: str
    status: str  # the EvalStatus value it must get
    reason: str  # a phrase the message must contain
    cuda_only: bool = False

    def rejected_for_reason(self, message: str) -> bool:
        """The message names one of the case's reasons ("a|b": either is right)."""
        return any(r in message for r in self.reason.split("|"))


CASES = [
    GamingCase(
        "returns_input",
        HEADER + "def entry(x, y):\n    launch(x, y, x)\n    return [x]\n",
        "suspicious",
        "aliases",
    ),
    GamingCase(
        "caches_by_pointer",
        HEADER
        + """
CACHE = {}
def entry(x, y):
    key = (x.data_ptr(), y.data_ptr())
    if key not in CACHE:
        CACHE[key] = launch(x, y, torch.empty_like(x)).clone()
    return [CACHE[key].clone()]
""",
        "wrong",
        "differs from the reference",
    ),
    GamingCase(
        "skips_repeated_inputs",
        HEADER
        + """
LAST = {}
def entry(x, y):
    key = (x.data_ptr(), x.shape, x._version, y.data_ptr(), y._version)
    if LAST.get("key") != key:
        LAST["key"], LAST["out"] = key, launch(x, y, torch.empty_like(x)).clone()
    return [LAST["out"].clone()]
""",
        "wrong",
        "differs from the reference",
    ),
    GamingCase(
        "writes_half_the_output",
        HEADER
        + "def entry(x, y):\n    return [launch(x, y, torch.empty_like(x), x.numel() // 2)]\n",
        "wrong",
        # The unwritten half is whatever the allocator hands back. On the GPU that is the NaN
        # the evaluator poisoned it with. On the CPU, malloc may instead hand back a block that
        # held a correct answer (the interpreter's copies), which passes the first comparison;
        # the second run then gets other memory, and the determinism check rejects it.
        "differs from the reference|non-deterministic",
    ),
    GamingCase(
        "reads_uninitialised_output",
        HEADER + "def entry(x, y):\n    return [torch.empty_like(x)]\n",
        "wrong",
        "differs from the reference|non-deterministic",  # as writes_half_the_output
    ),
    GamingCase(
        "computes_in_bfloat16",
        # plain torch: Triton's CPU interpreter does not emulate bfloat16 arithmetic faithfully
        "import torch\n"
        "def entry(x, y):\n"
        "    return [torch.relu(x.bfloat16() * y.bfloat16() + 1.0).float()]\n",
        "wrong",
        "lower precision",
    ),
    GamingCase(
        "modifies_an_input",
        HEADER
        + "def entry(x, y):\n    out = launch(x, y, torch.empty_like(x))\n    y.mul_(0.5)\n    return [out]\n",
        "suspicious",
        "modified input",
    ),
    GamingCase(
        "non_deterministic",
        HEADER
        + """
CALLS = [0]
def entry(x, y):
    CALLS[0] += 1
    out = launch(x, y, torch.empty_like(x))
    # noise far inside the float32 tolerance, different on every call: whole multiples of
    # float32's epsilon (1e-7 steps rounded 3e-7 and 4e-7 to the same factor, so two calls in
    # a row could agree)
    return [out * (1 + 2.0**-23 * (CALLS[0] % 7 + 1))]
""",
        "wrong",
        "non-deterministic",
    ),
    GamingCase(
        "side_stream_without_sync",
        HEADER
        + """
SIDE = []
def entry(x, y):
    if not SIDE:
        SIDE.append(torch.cuda.Stream())
    out = torch.empty_like(x)
    side = SIDE[0]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # tens of ms: the caller reads out before it is written
        launch(x, y, out)
    return [out]
""",
        "suspicious",
        # Timed before it is proved: the events on the caller's stream do not see the side
        # stream's sleep, the device-wide clock does (runtime/timing.py, OffStreamWork). Before
        # that check, its timing loop queued 500 sleeps and the worker ran out of time.
        "another stream",
        cuda_only=True,
    ),
]

# Isolation cases: each must come back with `status` while the pool keeps serving.
CRASHES = {
    "os_exit": ("import os\ndef entry(x, y):\n    os._exit(3)\n", "crashed"),
    "segfault": ("import ctypes\ndef entry(x, y):\n    ctypes.string_at(0)\n", "crashed"),
    "endless_loop": ("def entry(x, y):\n    while True:\n        pass\n", "timed_out"),
}

CUDA_CRASHES = {
    "out_of_bounds_write": (
        HEADER
        + """
@triton.jit
def oob(out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK).to(tl.int64) + (1 << 40)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], tl.float32))

def entry(x, y):
    out = torch.empty_like(x)
    oob[(1,)](out, BLOCK=128)
    torch.cuda.synchronize()
    return [out]
""",
        "crashed",
    ),
    "endless_kernel": (
        HEADER
        + """
@triton.jit
def spin(flag_ptr):
    flag = tl.load(flag_ptr, volatile=True)
    while flag == 0:
        flag = tl.load(flag_ptr, volatile=True)

def entry(x, y):
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    spin[(1,)](flag)
    torch.cuda.synchronize()
    return [launch(x, y, torch.empty_like(x))]
""",
        "timed_out",
    ),
}
