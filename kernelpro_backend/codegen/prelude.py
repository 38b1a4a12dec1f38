"""The lines every generated Triton module starts with (render.py, templates/tf32x3.py).

Owns: `PRELUDE`: the imports, `INTERPRET` (Triton's CPU interpreter, where tests widen dot
operands) and `_direct`, the default launcher. Must not: import anything of the package.
"""

PRELUDE = [
    "import os",
    "",
    "import torch",
    "import triton",
    "import triton.language as tl",
    "",
    "# Triton's CPU interpreter (tests) gets widened dot operands; GPUs never take that branch",
    'INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"',
    "",
    "",
    "def _direct(kernel):",
    '    """The default launcher: the jitted kernel itself (torch.library.wrap_triton fits here)."""',
    "    return kernel",
]
