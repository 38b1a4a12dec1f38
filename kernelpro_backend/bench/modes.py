"""The ways the bench runs a model: eager, Inductor, Inductor max-autotune, kernelpro, and
(named, not run by default) Inductor and kernelpro with CUDA graphs (`mode="reduce-overhead"`).

Owns: the mode names, how each wraps a model (`Mode.wrap`), and the kernelpro options a run
passes (`--search` adds {"search": "on-miss"}).
Must not: time or compare anything.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

EAGER = "eager"
INDUCTOR = "inductor"
MAX_AUTOTUNE = "inductor-max-autotune"
KERNELPRO = "kernelpro"
INDUCTOR_GRAPHS = "inductor-reduce-overhead"
KERNELPRO_GRAPHS = "kernelpro-reduce-overhead"
ALL_MODES: tuple[str, ...] = (EAGER, INDUCTOR, MAX_AUTOTUNE, KERNELPRO)  # the default run
# Run when named: a step whose host launches take as long as its GPU work (a GPT-2-small step
# on the H100: ~24 ms of launches either way, BENCHMARKS.md) hides a GPU-side gain unless both
# sides replay CUDA graphs.
EXTRA_MODES: tuple[str, ...] = (INDUCTOR_GRAPHS, KERNELPRO_GRAPHS)
# The Inductor mode a kernelpro mode is also measured against, like for like.
LIKE_FOR_LIKE: dict[str, str] = {KERNELPRO_GRAPHS: INDUCTOR_GRAPHS}


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    backend: str | Callable[..., Any] | None  # None: eager (no torch.compile)
    compile_mode: str | None = None
    options: tuple[tuple[str, Any], ...] = ()

    def wrap(self, model: nn.Module, sessions: list[Any] | None = None) -> Callable[..., Any]:
        """The model as this mode runs it. For kernelpro, `sessions` (if given) collects each
        compile's session: which subgraphs got a kernel."""
        if self.backend is None:
            return model
        options = dict(self.options) or None
        backend = self.backend
        if backend == KERNELPRO:
            ensure_kernelpro_registered()
            if sessions is not None:
                from ..backend import make_backend

                backend = make_backend(sessions=sessions)
            if self.compile_mode and options:
                # torch.compile takes a mode or options, not both; kernelpro's backend takes both
                if isinstance(backend, str):
                    from ..backend import kernelpro

                    backend = kernelpro
                backend = functools.partial(backend, mode=self.compile_mode, options=options)
                return torch.compile(model, backend=backend)
        return torch.compile(model, backend=backend, mode=self.compile_mode, options=options)

    @property
    def graphed(self) -> bool:
        """Whether the step replays CUDA graphs: `mode="reduce-overhead"`, or kernelpro with its
        cuda_graphs option (in the mode's options or the environment)."""
        if self.compile_mode == "reduce-overhead":
            return True
        if self.backend != KERNELPRO:
            return False
        from ..options import Options

        return Options.resolve(options=dict(self.options)).cuda_graphs

    def describe(self) -> str:
        if self.backend is None:
            return "eager PyTorch"
        text = f"torch.compile(backend={self.backend!r}"
        if self.compile_mode:
            text += f", mode={self.compile_mode!r}"
        if self.options:
            text += f", options={dict(self.options)!r}"
        return text + ")"


def make_modes(
    names: Sequence[str] = ALL_MODES,
    kernelpro_options: Mapping[str, Any] | None = None,
) -> list[Mode]:
    """The modes to run in the order given; eager always comes first (it is the reference).
    Order matters on a time budget: a slow compile (max-autotune) placed last cannot cost the
    other modes their results."""
    known = (*ALL_MODES, *EXTRA_MODES)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown bench mode(s) {unknown}; known modes: {list(known)}")
    kp_options = tuple(sorted((kernelpro_options or {}).items()))
    table = {
        EAGER: Mode(EAGER, None),
        INDUCTOR: Mode(INDUCTOR, "inductor"),
        MAX_AUTOTUNE: Mode(MAX_AUTOTUNE, "inductor", "max-autotune-no-cudagraphs"),
        KERNELPRO: Mode(KERNELPRO, "kernelpro", None, kp_options),
        INDUCTOR_GRAPHS: Mode(INDUCTOR_GRAPHS, "inductor", "reduce-overhead"),
        KERNELPRO_GRAPHS: Mode(KERNELPRO_GRAPHS, "kernelpro", "reduce-overhead", kp_options),
    }
    ordered = [EAGER] + [n for n in dict.fromkeys(names) if n != EAGER]
    return [table[n] for n in ordered]


def ensure_kernelpro_registered() -> None:
    """torch.compile(backend="kernelpro") finds the backend through the package's entry point,
    which exists only once kernelpro is pip-installed; when run from a source checkout
    (PYTHONPATH), register the same callable under the same name."""
    from torch._dynamo.backends.registry import list_backends, register_backend

    if "kernelpro" in list_backends(exclude_tags=()):
        return
    from ..backend import kernelpro

    try:
        from torch._dynamo.backends.registry import lookup_backend

        lookup_backend("kernelpro")  # also searches entry points
    except Exception:
        register_backend(kernelpro, name="kernelpro")
