"""KernelBench-format problem files as bench workloads.

Owns: loading each `*.py` file of a directory as a module from its path
(`load_problem_module`: importlib, no sys.path edits), building `Model(*get_init_inputs())`
and `get_inputs()` on the device, and turning each into an inference `Workload` named after
the file.
Must not: time or compare anything. A problem file is trusted code: it is executed.

A KernelBench problem file defines:
    class Model(nn.Module): ...
    def get_inputs() -> list[Tensor | Any]: ...
    def get_init_inputs() -> list[Any]: ...
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from types import ModuleType

import torch

from .workload import Workload

# Problem workloads are named "kb:<file stem>", so a problem never shares a name with a
# built-in workload ("kb:softmax" vs "softmax") in tables and JSON.
PROBLEM_PREFIX = "kb:"


class ProblemError(ValueError):
    """A problem file is missing, fails to import, or lacks part of the KernelBench format."""


def load_problem_module(path: Path) -> ModuleType:
    # A unique module name per path, so two files called `problem.py` in different
    # directories never share one module object.
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"kernelpro_problem_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise ProblemError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    missing = [a for a in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, a)]
    if missing:
        raise ProblemError(
            f"{path}: not a KernelBench problem, it lacks {', '.join(missing)} (a problem file "
            "defines class Model(nn.Module), get_inputs() and get_init_inputs())"
        )
    return module


def _to_device(value: object, device: torch.device, dtype: torch.dtype | None) -> object:
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
    return value


def load_problem(
    path: str | Path, device: torch.device, dtype: torch.dtype | None = None, seed: int = 0
) -> Workload:
    """One problem file -> an inference Workload (weights and inputs seeded with `seed`).
    `dtype` None keeps the file's own dtypes (KernelBench problems are float32)."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"{path}: no such problem file")
    module = load_problem_module(path)
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    if not isinstance(model, torch.nn.Module):
        raise ProblemError(f"{path}: Model(*get_init_inputs()) is not an nn.Module")
    model = model.to(device)
    if dtype is not None:
        model = model.to(dtype)
    torch.manual_seed(seed + 1)
    raw_inputs = module.get_inputs()
    inputs = tuple(_to_device(v, device, dtype) for v in raw_inputs)
    tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
    if not tensors:
        raise ProblemError(f"{path}: get_inputs() returned no tensor")
    floats = [t.dtype for t in tensors if t.is_floating_point()]
    run_dtype = dtype or (floats[0] if floats else torch.float32)
    return Workload(
        name=PROBLEM_PREFIX + path.stem,
        model=model,
        inputs=inputs,
        dtype=run_dtype,
        size="problem",
        source=str(path),
    )


def problem_files(directory: str | Path) -> list[Path]:
    """The `*.py` problem files of `directory`, sorted by name (`_*.py` files are skipped)."""
    root = Path(directory)
    if not root.is_dir():
        raise ProblemError(f"{root}: not a directory of KernelBench problem files")
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise ProblemError(f"{root}: holds no *.py problem files")
    return files


def load_problems(
    directory: str | Path, device: torch.device, dtype: torch.dtype | None = None
) -> list[Workload]:
    """Every problem file of `directory` loaded at once (the bench loads them one at a time
    instead: KernelBench inputs can take gigabytes each)."""
    return [load_problem(p, device, dtype) for p in problem_files(directory)]
