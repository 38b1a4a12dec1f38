"""The one typed options object of the backend.

Owns: the option names, their types, defaults and allowed values; reading them from
`torch.compile(..., options={...})`, from `mode`, and from `KERNELPRO_*` environment variables.
Must not: hold mutable module state or act on the options (the backend does that).

Precedence: explicit `options` > environment variables > defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import types
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args, get_origin, get_type_hints

from .logs import warn

Search = Literal["cache-only", "on-miss", "off"]
Fallback = Literal["inductor", "eager"]
Precision = Literal["auto", "ieee", "tf32", "tf32x3"]
Objective = Literal["time", "energy"]
Proposer = Literal["rules", "llm"]
Launch = Literal["inline", "op"]
Distributed = Literal["auto", "off"]
DynamicShapes = Literal["dispatch", "transfer", "off"]
InductorMode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]

ENV_PREFIX = "KERNELPRO_"


def default_workers(cpus: int | None = None, local_ranks: int | None = None) -> int:
    """Half the CPU cores, at least 2 and at most 8. In a job of several ranks on this host
    (torchrun's LOCAL_WORLD_SIZE), three for every eight cores of the rank's share: two ranks
    of a 32-core host warming up the bench's MLP took 0.66x the one-GPU time with 8 workers
    each, 0.55x with 6 (2x H200, BENCHMARKS.md); the ranks' own processes and the compilers
    of 16 workers left each worker less than two cores."""
    cpus = cpus if cpus is not None else (os.cpu_count() or 2)
    if local_ranks is None:
        local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    if local_ranks > 1:
        return max(2, min(8, cpus // local_ranks * 3 // 8))
    return max(2, min(8, cpus // 2))


class OptionsError(ValueError):
    """An option has an unknown name, a wrong type or a value outside its allowed set."""


@dataclasses.dataclass(frozen=True)
class Options:
    """Everything a user can set. Field names are the keys of `options={...}`;
    `KERNELPRO_<NAME>` (upper case) sets the same field from the environment."""

    # "cache-only": use cached kernels, run the fallback on misses and record them;
    # "on-miss": search for a kernel when the cache misses (needs a CUDA GPU);
    # "off": never touch the cache or search: the fallback alone (no torch-level rewrites).
    search: Search = "cache-only"
    # What runs the parts of the graph that have no kernel: Inductor or eager aten.
    fallback: Fallback = "inductor"
    # Wall-time and trial budget per subgraph when searching.
    budget_s: float = 120.0
    max_trials: int = 64
    # Writable cache directory (default ~/.cache/kernelpro) and read-only ones searched after it.
    cache_dir: str | None = None
    extra_cache_dirs: tuple[str, ...] = ()
    # Key files (raw secrets, 32+ bytes) whose bundle signatures this user trusts; with
    # require_signed_bundles, a bundle of an extra cache directory is read only when one of them
    # verifies its signature. A bad signature (modified after signing) is never read.
    trusted_bundle_keys: tuple[str, ...] = ()
    require_signed_bundles: bool = False
    # "auto" follows torch.get_float32_matmul_precision(); the others force a float32 mode.
    precision: Precision = "auto"
    objective: Objective = "time"
    # How a kernel is launched: "inline" traces it into the aten graph so Inductor launches it
    # from its own generated code (Inductor fallback, kernels that support it); "op" always
    # goes through the opaque kernelpro::launch custom op (and is what the eager fallback uses).
    launch: Launch = "inline"
    # A kernel replaces a subgraph only if it saves at least this much GPU time per call: the
    # launch costs host time and splits Inductor's fusions around it. None (default) picks by
    # launch path: OP_MIN_GAIN_US through kernelpro::launch, INLINE_MIN_GAIN_US inlined.
    min_gain_us: float | None = None
    # Who proposes the next candidates: the built-in expert rules, or an LLM behind an
    # OpenAI-compatible endpoint (OPENAI_BASE_URL, OPENAI_API_KEY).
    proposer: Proposer = "rules"
    # Search only subgraphs with these patterns (as `kernelpro explain` names them, e.g.
    # "sdpa_backward", "rms_norm"); the others still use cache hits. Empty: every pattern.
    search_patterns: tuple[str, ...] = ()
    # Stage-2 profiling tools a search runs on every candidate that works, after the roofline
    # class calls for them (profilers/tools.py names them); their findings steer the rule
    # proposer (spills -> fewer warps, ...). "none" / empty: the roofline alone. "ncu" profiles
    # the candidates that beat the best so far with Nsight Compute (~20 s each).
    search_tools: tuple[str, ...] = ("ptxas", "sass")
    # The LLM proposer's model; None: $OPENAI_MODEL, else search.llm.DEFAULT_MODEL.
    llm_model: str | None = None
    # Isolated worker processes used to compile, validate and time candidates: they load and
    # compile in parallel and take the GPU one at a time to validate and time, so timings stay
    # clean. Fewer run at once when the subgraph's footprint leaves no room for more. Default:
    # half the CPU cores, 2 to 8 (compiling is most of a trial: 1.8 s of CPU against 0.7 s on
    # the GPU, measured on H100).
    workers: int = dataclasses.field(default_factory=lambda: default_workers())
    # Seconds one candidate may take in a worker (compile + validate + time + stage-2 tools),
    # and more when ncu may run (~20 s typical, retried on old ncu builds).
    job_timeout_s: float = 120.0
    ncu_timeout_s: float = 240.0
    # Seconds one Nsight Compute run may take in a job (retried with fewer metrics on old ncu
    # builds, all within ncu_timeout_s; profilers/ncu.py NCU_RUN_TIMEOUT_S).
    ncu_run_timeout_s: float = 120.0
    # Seconds a worker may take to start: torch's import, a CUDA context, Inductor's warm-up.
    worker_start_timeout_s: float = 180.0
    # Seconds nvcc may take on one CUDA candidate: CuTe GEMMs take 20-60 s (NVCC_TIMEOUT_S).
    nvcc_timeout_s: float = 90.0
    # nvcc processes building CUTLASS GEMM libraries in the background at once, for the
    # searches of 16-bit GEMMs on Hopper (tuner/cutlass_builds.py); 0: no CUTLASS candidates.
    cutlass_jobs: int = 6
    # Seconds one request of the LLM proposer may take: a ~4 K-token rewrite is ~60 s at ~70
    # tokens/s, so 180 s covers slow local servers (search/llm/client.py TIMEOUT_S).
    llm_timeout_s: float = 180.0
    # Timed seconds per search candidate (timing_settle: until settled), per `cache verify` entry;
    # untimed seconds before (timing_heat_s: runtime/timing.py, boost clocks; 0 until measured).
    timing_s: float = 0.25
    check_timing_s: float = 0.05
    timing_settle: bool = True
    timing_heat_s: float = 0.0
    # The worker pool is kept for the whole process (warm CUDA contexts, torch and Triton
    # imported) and shut down after this many idle seconds, or at exit.
    pool_idle_s: float = 300.0
    # Under torch.distributed (torchrun, DDP) with search="on-miss", "auto" splits the misses
    # across the ranks, shares the winners and installs the same kernel on every rank
    # (tuner/distributed.py); "off": each process searches on its own.
    distributed: Distributed = "auto"
    # Seconds a rank waits for the others at an exchange: longer than any rank's share of
    # search takes (its subgraphs x budget_s); a rank gone that long is taken as dead.
    distributed_timeout_s: float = 3600.0
    # Subgraphs with symbolic sizes (recompiled with dynamic sizes after a shape change):
    # "dispatch" serves them per concrete size through a shape dispatcher (kernels keyed, proved and
    # cached per size, else the subgraph compiled once with dynamic sizes; rewrite/dispatch.py);
    # "transfer" also gives a size with no entry, under search="cache-only", its power-of-two
    # bucket's winner once proved at its own size; "off": the fallback.
    dynamic_shapes: DynamicShapes = "dispatch"
    # Sizes of a dynamic dimension worth a kernel of their own, like vLLM's `compile_sizes`
    # (e.g. the batch sizes a server sees most): under search="on-miss", a shape dispatcher
    # searches a size first met at run time only when one of its dynamic dimensions has a
    # listed value; any other size gets a cached kernel, else the winner of its power-of-two
    # bucket proved at its own size (as dynamic_shapes="transfer"), else the fallback — so a
    # loop over many sizes does not search at each. Empty: every size may be searched.
    compile_sizes: tuple[int, ...] = ()
    # Hand-written attention -> scaled_dot_product_attention (fx_passes/attention_rewrite.py);
    # SDPA masks simplified (sdpa_mask.py) or, strided, copied contiguous (sdpa_mask_layout.py).
    rewrite_attention: bool = True
    # An LM head and its cross-entropy (linear -> [view] -> [.float()] -> cross_entropy) become
    # one op that walks the tokens in chunks and never writes the [tokens, vocab] logits
    # (fx_passes/linear_ce_rewrite.py, ops/linear_ce.py; README's option table has figures).
    rewrite_linear_cross_entropy: bool = True
    rewrite_pad_gemm: bool = True  # unaligned linears padded: fx_passes/pad_gemm.py says when
    # Replay the compiled graphs as CUDA graphs (Inductor's cudagraph trees, as
    # mode="reduce-overhead"), for host-bound steps (README's option table). Off by default.
    cuda_graphs: bool = False
    # Judge every compiled graph that installs kernels in context: its first calls take turns
    # with and without them, and they stay only if the graph is faster with them (rewrite/judged).
    in_context: bool = True
    # Show a progress bar during searches.
    progress: bool = True
    # torch.compile's mode= for the Inductor fallback (torch.compile takes mode= or options=).
    inductor_mode: InductorMode = "default"

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def resolve(
        cls,
        mode: str | None = None,
        options: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Options:
        """Build the options from torch.compile's `mode`/`options` and the environment."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        names = cls.field_names()
        _warn_unknown_variables(environ, names)
        for name in names:
            if raw := environ.get(ENV_PREFIX + name.upper()):
                values[name] = _parse(name, raw, source=ENV_PREFIX + name.upper())
        for name, value in (options or {}).items():
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise OptionsError(f"unknown kernelpro option {name!r}{hint} (known: {', '.join(names)})")  # fmt: skip
            values[name] = _coerce(name, value, source=f"options[{name!r}]")
        if mode is not None:  # torch.compile's mode=, the same as options["inductor_mode"]
            values["inductor_mode"] = _coerce("inductor_mode", mode, source="mode")
            if (options or {}).get("inductor_mode", mode) != mode:
                raise OptionsError(f"mode={mode!r} and options['inductor_mode'] disagree; give one")
        return cls(**values)

    @property
    def inlines(self) -> bool:
        """Whether kernels are traced into Inductor's graph (else kernelpro::launch)."""
        return self.launch == "inline" and self.fallback == "inductor"

    def min_gain_ms(self) -> float:
        """The gain a kernel must show to replace a subgraph, for this launch path."""
        if self.min_gain_us is not None:
            return self.min_gain_us / 1e3
        return (INLINE_MIN_GAIN_US if self.inlines else OP_MIN_GAIN_US) / 1e3

    def op_min_gain_ms(self) -> float:
        """The gain a kernel that cannot be inlined (it runs through kernelpro::launch, as the
        eager ATen candidate does) must show."""
        return (OP_MIN_GAIN_US if self.min_gain_us is None else self.min_gain_us) / 1e3

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Host cost of one kernelpro::launch call, measured on H100 (BENCHMARKS.md): a compiled
# function calling one kernel through it took 115 us per call against 36 us for plain Inductor,
# and 7 kernels that each won by 0.2-5 us in isolation made a training step 1.5 ms slower.
OP_MIN_GAIN_US = 80.0
# Inlined kernels are launched by Inductor's wrapper like its own; what remains is the timing
# noise and the fusions the split costs Inductor, so a small margin.
INLINE_MIN_GAIN_US = 2.0


@functools.cache
def _resolved_type(name: str) -> Any:
    """The field's type for the checks: Literal, bool, int, float, tuple or str (`X | None`)."""
    hint = get_type_hints(Options)[name]
    if get_origin(hint) is tuple:
        return tuple
    if isinstance(hint, types.UnionType):
        return next(a for a in get_args(hint) if a is not type(None))
    return hint


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _parse(name: str, raw: str, source: str) -> Any:
    """Parse an environment string into the field's type."""
    kind = _resolved_type(name)
    if name == "min_gain_us" and raw.strip().lower() == "auto":
        return None
    if kind is bool:
        if (low := raw.strip().lower()) not in _TRUE + _FALSE:
            raise OptionsError(f"{source}={raw!r}: expected one of 1/0/true/false/yes/no/on/off")
        return low in _TRUE
    if name == "compile_sizes":
        return _sizes(raw, source)
    if kind is tuple:
        return _listed(name, raw, source)
    if kind in (int, float):
        try:
            number = kind(raw)
        except ValueError:
            raise OptionsError(f"{source}={raw!r}: expected a number ({kind.__name__})") from None
        return _coerce(name, number, source)
    return _coerce(name, raw, source)


_ZERO_ALLOWED = ("min_gain_us", "cutlass_jobs")  # no minimum gain; no CUTLASS builds


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = _resolved_type(name)
    if name == "min_gain_us" and value is None:
        return None  # auto: by launch path
    if get_origin(kind) is Literal:
        if value not in (allowed := get_args(kind)):
            raise OptionsError(f"{source}={value!r}: expected one of {list(allowed)}")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise OptionsError(f"{source}={value!r}: expected True or False")
        return value
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OptionsError(f"{source}={value!r}: expected a number")
        if kind is int and int(value) != value:
            raise OptionsError(f"{source}={value!r}: expected a whole number")
        if not math.isfinite(value):
            raise OptionsError(f"{source}={value!r}: must be a finite number")
        if value < 0 or (value == 0 and name not in _ZERO_ALLOWED):
            raise OptionsError(f"{source}={value!r}: must be greater than 0")
        if value > (top := _maximum(name))[0]:
            raise OptionsError(f"{source}={value!r}: must be at most {top[0]} ({top[1]})")
        return kind(value)
    if name == "compile_sizes":
        return _sizes(value, source)
    if kind is tuple:
        return _listed(name, value, source)
    value = os.fspath(value) if name == "cache_dir" and isinstance(value, os.PathLike) else value
    if value is not None and not isinstance(value, str):
        raise OptionsError(f"{source}={value!r}: expected {_WHAT.get(name, 'a string')}")
    return value


# Upper bounds (README's option table): past them a value is a slip (ms typed for s, a typo).
_MAXIMA = {
    "max_trials": (10_000, "156 times the default 64; budget_s ends a search sooner"),
    "budget_s": (86_400, "a day of search per subgraph"),
    **dict.fromkeys(("timing_s", "check_timing_s", "timing_heat_s"), (60, "a minute of runs")),
    "min_gain_us": (1_000_000, "a second per call; search='off' uses no kernel at all"),
}


def _maximum(name: str) -> tuple[int, str]:
    """A number option's upper bound and why; any other timeout's is a week."""
    if name in ("workers", "cutlass_jobs"):  # each keeps a CPU core busy; 8: the default's top
        return max(8, os.cpu_count() or 1), "this machine's CPU count, or 8 if that is less"
    return _MAXIMA.get(name, (7 * 86_400, "a week; a rank or tool silent that long is gone"))


def _listed(name: str, value: Any, source: str) -> tuple[str, ...]:
    """A tuple option from a list, or from one string as in the environment (names split at
    ",", paths at os.pathsep); a path may be str or os.PathLike. Key files must exist (a trust
    setting fails closed); a missing extra cache directory is warned about (a data dir)."""
    paths, items = name not in _NAME_LISTS, value
    if isinstance(value, str):
        items = [p.strip() for p in value.split(os.pathsep if paths else ",") if p.strip()]
    elif paths and isinstance(value, os.PathLike):
        items = [value]
    kinds = (str, os.PathLike) if paths else str
    ok = isinstance(items, Iterable) and not isinstance(items, bytes)
    got = [os.fspath(v) if isinstance(v, kinds) else None for v in (items if ok else [None])]
    found = [v for v in got if isinstance(v, str)]
    if len(found) != len(got):
        what = _NAME_LISTS.get(name) or _WHAT[name]
        raise OptionsError(f"{source}={value!r}: expected a list of {what}")
    if name == "search_tools":
        return _tool_names(tuple(found), source)
    if name == "trusted_bundle_keys" and (gone := [k for k in found if not os.path.isfile(k)]):
        raise OptionsError(
            f"{source}: no key file at {', '.join(gone)}; a trusted key that cannot be read "
            "fails closed: create it (head -c 32 /dev/urandom > KEY; chmod 600 KEY) or drop it"
        )
    for d in [d for d in found if name == "extra_cache_dirs"]:
        if not os.path.exists(os.path.expanduser(d)):
            warn(f"{source}: {d} does not exist; no kernel is read from it (the fallback runs "
                 "where no other cache has one)")  # fmt: skip
    return tuple(found)


def _sizes(values: Any, source: str) -> tuple[int, ...]:
    """`compile_sizes` as a sorted tuple of positive ints ("256,512" or [256, 512])."""
    sizes = []
    for v in values.split(",") if isinstance(values, str) else values:
        if isinstance(v, str) and not v.strip():
            continue
        try:
            size = int(v.strip()) if isinstance(v, str) else v
        except ValueError:
            raise OptionsError(f"{source}={values!r}: expected sizes, e.g. 256,512") from None
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise OptionsError(f"{source}={values!r}: expected positive whole sizes")
        sizes.append(size)
    return tuple(sorted(set(sizes)))


# The stage-2 profiling tools `search_tools` may name: profilers/tools.py registers one tool of
# each name (a test holds the two lists equal; options sits below profilers and imports none).
PROFILING_TOOLS = ("energy", "ncu", "ptxas", "sass", "timeline")
# Tuple options whose string form is a ","-separated list of names, and what the names are.
_NAME_LISTS = {"search_patterns": "pattern names", "search_tools": "profiling tool names"}
# What other options hold, for their error messages (path lists split at os.pathsep).
_WHAT = {"cache_dir": "a directory path", "llm_model": "a model name (a string)",
         "trusted_bundle_keys": "key file paths", "extra_cache_dirs": "directory paths"}  # fmt: skip


OTHER_VARIABLES = ("CUBIN_DIR",)  # KERNELPRO_* variables read elsewhere (paths), not options


def _warn_unknown_variables(environ: Mapping[str, str], names: tuple[str, ...]) -> None:
    """Warn (once per name and process) about a KERNELPRO_* variable no option reads, naming
    the closest valid one: a misspelt variable must not be silently ignored."""
    known = {n.upper() for n in names} | set(OTHER_VARIABLES)
    for var in sorted(environ):
        if not var.startswith(ENV_PREFIX) or var[len(ENV_PREFIX) :] in known:
            continue
        close = difflib.get_close_matches(var[len(ENV_PREFIX) :], sorted(known), n=1)
        hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
        warn(f"{var} is not a kernelpro setting and is ignored{hint}")


def _tool_names(names: tuple[str, ...], source: str) -> tuple[str, ...]:
    """Registered stage-2 tool names, in order, once each; ("none",) means no tools."""
    if names in ((), ("none",)):
        return ()
    if unknown := [n for n in names if n not in PROFILING_TOOLS]:
        raise OptionsError(
            f"{source}={names!r}: unknown profiling tools {unknown}; known: "
            f"{', '.join(sorted(PROFILING_TOOLS))} (or 'none' for the roofline alone)"
        )
    return tuple(dict.fromkeys(names))
