"""The names of subgraph patterns: what a subgraph is called, and whether a name is one.

Owns: `pattern_name` (kind + ops -> "softmax", "addmm+epilogue", "sdpa_backward", ...),
`is_pattern_name` and `check_pattern_names` (the `search_patterns` option is checked here, so a
misspelt name fails loudly instead of matching nothing).
Must not: classify ops (ops.py) or build subgraphs (subgraph.py).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from ..options import OptionsError

_PATTERN_RULES: list[tuple[str, set[str]]] = [
    ("cross_entropy", {"amax", "exp", "log", "gather"}),
    ("cross_entropy", {"amax", "exp", "log", "nll_loss_forward"}),
    ("log_softmax", {"amax", "exp", "log"}),
    ("softmax", {"amax", "exp", "div"}),
    ("softmax", {"_softmax"}),
    ("log_softmax", {"_log_softmax"}),
    ("layer_norm", {"native_layer_norm"}),
    ("rms_norm", {"_fused_rms_norm"}),
    ("norm", {"var_mean", "rsqrt"}),
    ("rms_norm", {"mean", "rsqrt"}),
]


def pattern_name(kind: str, ops: list[str], graph_kind: str) -> str:
    """The name of a subgraph of this kind with these ops (the names `kernelpro explain`
    prints and `search_patterns` selects)."""
    names = set(ops)
    if kind in ("gemm", "conv"):
        anchor = next(o for o in ops if o in ("mm", "bmm", "addmm", "baddbmm") or "conv" in o)
        extra = [o for o in ops if o != anchor]
        reductions = {"sum", "amax", "amin", "mean", "logsumexp", "max", "min"} & names
        tag = anchor + ("+epilogue" if extra else "")
        return tag + ("+rowreduce" if reductions else "")
    if kind == "attention":
        return "sdpa_backward" if any("backward" in o for o in ops) else "sdpa"
    if kind == "reduction":
        for name, needed in _PATTERN_RULES:
            if needed <= names:
                return name + ("_backward" if graph_kind == "backward" else "")
        return "reduction"
    return "pointwise"


# A GEMM or convolution is named by its anchor op, then "+epilogue" and "+rowreduce".
_GEMM_NAME = re.compile(r"(mm|bmm|addmm|baddbmm|[a-z_]*conv[a-z_0-9]*)(\+epilogue)?(\+rowreduce)?")
# Names to suggest from when a name is not one.
EXAMPLE_NAMES = tuple(
    sorted(
        {name + suffix for name, _ in _PATTERN_RULES for suffix in ("", "_backward")}
        | {"reduction", "pointwise", "sdpa", "sdpa_backward"}
        | {a + e for a in ("mm", "bmm", "addmm", "baddbmm", "convolution")
           for e in ("", "+epilogue", "+epilogue+rowreduce")}
    )
)  # fmt: skip


def is_pattern_name(name: str) -> bool:
    """Whether `pattern_name` can return `name`."""
    reductions = {n for n, _ in _PATTERN_RULES} | {"reduction"}
    base = name.removesuffix("_backward")
    return (
        name in ("pointwise", "sdpa", "sdpa_backward")
        or base in reductions
        or _GEMM_NAME.fullmatch(name) is not None
    )


def check_pattern_names(names: Sequence[str], source: str = "search_patterns") -> None:
    """Raise OptionsError naming every name no subgraph can have, with the closest valid one."""
    bad = [n for n in names if not is_pattern_name(n)]
    if not bad:
        return
    hints = []
    for n in bad:
        close = difflib.get_close_matches(n, EXAMPLE_NAMES, n=1)
        hints.append(f"{n!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise OptionsError(
        f"{source}: no subgraph is named {', '.join(hints)}; `kernelpro explain` lists a "
        f"model's pattern names, e.g. {', '.join(EXAMPLE_NAMES[:6])}"
    )
