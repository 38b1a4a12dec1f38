"""The cached kernel record and its byte encoding.

Owns: `KernelArtifact` (what a search winner is: language, source, entry, spec, launch metadata,
compiled binary, measured times (and joules, with the selection rule that chose it), SOL
fraction, provenance), `Provenance`, and the entry encoding:
one canonical JSON document (binary fields base64) carrying the cache key, the artifact and a
sha256 over both. The same bytes are stored in the disk cache and shipped in bundles.
Must not: compile, load or run kernels (loaders do), or read or write files.

Nothing here is ever unpickled: decoding is `json.loads` (after the size and nesting limits of
limits.py) plus type checks, and a document that does not check out raises `CorruptEntry`
naming what is wrong.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import json
from typing import Any, get_args

from ..options import Objective
from . import limits
from .limits import loads_bounded
from .toolchain import CACHE_SCHEMA_VERSION, CacheKey, Toolchain, current_gpu, current_toolchain

ENTRY_FORMAT = "kernelpro-entry"


class CorruptEntry(ValueError):
    """An entry's bytes do not decode into a valid, checksummed entry of this schema."""


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# How an entry got its proof. "search": chosen by a search, "reproved": an entry made elsewhere,
# re-proved and re-timed — both on the machine its toolchain and GPU name. "import": copied in
# by `kernelpro cache import`, not yet proved here.
ORIGINS = ("search", "reproved", "import")


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where a kernel came from, and where it was last proved and timed."""

    toolchain: Toolchain = dataclasses.field(default_factory=current_toolchain)
    search_log: str | None = None  # id (or path) of the search log that chose it
    created: str = dataclasses.field(default_factory=utc_now)  # ISO 8601, UTC
    tools: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)  # nvcc, driver…
    gpu: str = dataclasses.field(default_factory=current_gpu)  # the GPU model it was timed on
    origin: str = "search"
    # When `cache import` brought it into this cache (ISO 8601, UTC); "" when not imported, or
    # imported before kernelpro recorded it. `prune --older-than` ages an entry from it.
    imported: str = ""

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"provenance origin must be one of {ORIGINS}, got {self.origin!r}")

    def proved_on(self, toolchain: Toolchain, gpu: str) -> bool:
        """Whether this entry was proved and timed on a machine like this one."""
        return self.origin != "import" and (self.toolchain, self.gpu) == (toolchain, gpu)

    def where(self) -> str:
        return f"{self.gpu} with {self.toolchain}"

    def since(self) -> str:
        """When this entry came into this cache: its import, else its creation (an entry
        imported before imports were recorded has only its creation in the bundle's cache)."""
        return self.imported or self.created

    def to_dict(self) -> dict[str, Any]:
        return {
            "toolchain": self.toolchain.to_dict(),
            "search_log": self.search_log,
            "created": self.created,
            "tools": dict(sorted(self.tools.items())),
            "gpu": self.gpu,
            "origin": self.origin,
            **({"imported": self.imported} if self.imported else {}),  # absent: bytes unchanged
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Provenance:
        return cls(
            toolchain=Toolchain.from_dict(raw["toolchain"]),
            search_log=_opt(raw["search_log"], str, "provenance.search_log"),
            created=_req(raw["created"], str, "provenance.created"),
            tools={str(k): str(v) for k, v in _req(raw["tools"], dict, "tools").items()},
            gpu=_req(raw["gpu"], str, "provenance.gpu"),
            origin=_req(raw["origin"], str, "provenance.origin"),
            imported=_opt(raw.get("imported"), str, "provenance.imported") or "",
        )


@dataclasses.dataclass(frozen=True)
class KernelArtifact:
    """A proved, timed kernel for one subgraph. Frozen; dict fields are excluded from hashing."""

    language: str  # "triton" | "cuda" | "python" (tests)
    source: str
    entry: str  # function (triton/python) or __global__ symbol (cuda) to call
    spec_json: str | None = None  # KernelSpec.to_json() when codegen produced it
    launch: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)  # grid, block…
    binary: bytes | None = None  # compiled cubin, where there is one
    kernel_ms: float | None = None
    baselines_ms: dict[str, float] = dataclasses.field(default_factory=dict, hash=False)
    sol_fraction: float | None = None
    # What the kernel computes, for listings, filters and re-validation: the subgraph's pattern,
    # kind, compute ops, and canonical text (whose sha256 is the key's structure hash).
    pattern: str = ""
    kind: str = ""
    ops: tuple[str, ...] = ()
    subgraph_text: str = ""
    provenance: Provenance = dataclasses.field(default_factory=Provenance)
    # For an instance of a symbolic subgraph: its symbolic key's digest, so the winners at
    # other sizes can seed a search at a new one (written only when set: older entries and
    # their checksums stay as they were).
    family: str = ""
    # Measured accuracy, where the policy promises one (tf32x3: the kernel's largest error
    # against float64 and IEEE float32 eager's on the same inputs); written only when set.
    accuracy: dict[str, float] = dataclasses.field(default_factory=dict, hash=False)
    # The selection rule that chose it (search/winner.py): "energy" where only objective
    # "energy"'s rule did (its time within that rule's tolerance, not a clear win: the finder
    # serves it under "energy" alone, tuner/payoff.py), else "time". Written only for "energy".
    objective: str = "time"
    # Joules per call where the search measured them (objective "energy"): the entry's and each
    # baseline's, as `kernel_ms` and `baselines_ms`; written only when set.
    kernel_j: float | None = None
    baselines_j: dict[str, float] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.objective not in get_args(Objective):
            raise ValueError(
                f"objective must be one of {get_args(Objective)}, got {self.objective!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        optional: dict[str, Any] = {"family": self.family} if self.family else {}
        if self.accuracy:
            optional["accuracy"] = dict(sorted(self.accuracy.items()))
        if self.objective != "time":
            optional["objective"] = self.objective
        if self.kernel_j is not None:
            optional["kernel_j"] = self.kernel_j
        if self.baselines_j:
            optional["baselines_j"] = dict(sorted(self.baselines_j.items()))
        return optional | {
            "language": self.language,
            "source": self.source,
            "entry": self.entry,
            "spec_json": self.spec_json,
            "launch": self.launch,
            "binary": None if self.binary is None else base64.b64encode(self.binary).decode(),
            "kernel_ms": self.kernel_ms,
            "baselines_ms": dict(sorted(self.baselines_ms.items())),
            "sol_fraction": self.sol_fraction,
            "pattern": self.pattern,
            "kind": self.kind,
            "ops": list(self.ops),
            "subgraph_text": self.subgraph_text,
            "provenance": self.provenance.to_dict(),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KernelArtifact:
        binary = _opt(raw["binary"], str, "binary")
        return cls(
            language=_req(raw["language"], str, "language"),
            source=_req(raw["source"], str, "source"),
            entry=_req(raw["entry"], str, "entry"),
            spec_json=_opt(raw["spec_json"], str, "spec_json"),
            launch=_req(raw["launch"], dict, "launch"),
            binary=None if binary is None else base64.b64decode(binary, validate=True),
            kernel_ms=_opt_number(raw["kernel_ms"], "kernel_ms"),
            baselines_ms={
                str(k): float(_req(v, (int, float), "baselines_ms"))
                for k, v in _req(raw["baselines_ms"], dict, "baselines_ms").items()
            },
            sol_fraction=_opt_number(raw["sol_fraction"], "sol_fraction"),
            pattern=_req(raw["pattern"], str, "pattern"),
            kind=_req(raw["kind"], str, "kind"),
            ops=tuple(_req(o, str, "ops") for o in _req(raw["ops"], list, "ops")),
            subgraph_text=_req(raw["subgraph_text"], str, "subgraph_text"),
            provenance=Provenance.from_dict(_req(raw["provenance"], dict, "provenance")),
            family=_req(raw.get("family", ""), str, "family"),
            accuracy={
                str(k): float(_req(v, (int, float), "accuracy"))
                for k, v in _req(raw.get("accuracy", {}), dict, "accuracy").items()
            },
            objective=_req(raw.get("objective", "time"), str, "objective"),
            kernel_j=_opt_number(raw.get("kernel_j"), "kernel_j"),
            baselines_j={
                str(k): float(_req(v, (int, float), "baselines_j"))
                for k, v in _req(raw.get("baselines_j", {}), dict, "baselines_j").items()
            },
        )

    @property
    def checksum(self) -> str:
        """sha256 over the artifact's canonical JSON (binary included, as base64)."""
        return hashlib.sha256(_canonical(self.to_dict()).encode()).hexdigest()

    @property
    def template(self) -> str | None:
        """The codegen template of a spec-built kernel (its spec's "template"), else None."""
        try:
            spec = json.loads(self.spec_json) if self.spec_json else None
        except ValueError:
            return None
        return spec.get("template") if isinstance(spec, dict) else None

    @property
    def shown_language(self) -> str:
        """The language listings show: "cutlass" for a CUTLASS GEMM or conv (a generated Python
        module around CUDA C++, loaded as the Triton ones are), else `language`."""
        cutlass = self.template in ("gemm_cutlass", "conv_cutlass")  # codegen's CUTLASS_TEMPLATES
        return "cutlass" if cutlass else self.language

    @property
    def speedup(self) -> float | None:
        """Speedup over the best baseline (eager, inductor), where both sides were measured."""
        if self.kernel_ms is None or not self.baselines_ms or self.kernel_ms <= 0:
            return None
        return min(self.baselines_ms.values()) / self.kernel_ms


@dataclasses.dataclass(frozen=True)
class Entry:
    """A decoded, checksum-verified cache entry."""

    key: CacheKey
    artifact: KernelArtifact
    sha256: str


def encode_entry(key: CacheKey, artifact: KernelArtifact) -> bytes:
    """The entry's bytes: canonical JSON with a sha256 over key, schema and artifact."""
    body = {"format": ENTRY_FORMAT, "schema": key.schema, "key": key.to_dict()}
    body["artifact"] = artifact.to_dict()
    doc = dict(body, sha256=hashlib.sha256(_canonical(body).encode()).hexdigest())
    return _canonical(doc).encode()


def decode_entry(data: bytes) -> Entry:
    """Parse and verify an entry; raises CorruptEntry saying what is wrong."""
    try:
        doc = loads_bounded(data, "the entry", limits.MAX_MEMBER_BYTES)
    except ValueError as e:  # LimitExceeded too: over the size or nesting limit
        raise CorruptEntry(f"unparsable entry ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != ENTRY_FORMAT:
        raise CorruptEntry(f"not a kernelpro entry (format is not {ENTRY_FORMAT!r})")
    if doc.get("schema") != CACHE_SCHEMA_VERSION:
        raise CorruptEntry(
            f"wrong schema: entry has {doc.get('schema')!r}, this kernelpro reads "
            f"{CACHE_SCHEMA_VERSION}; re-run the search or `kernelpro cache prune`"
        )
    claimed = doc.pop("sha256", None)
    actual = hashlib.sha256(_canonical(doc).encode()).hexdigest()
    if claimed != actual:
        raise CorruptEntry(f"bad checksum: stored {claimed!r}, content hashes to {actual}")
    try:
        key = CacheKey.from_dict(doc["key"])
        artifact = KernelArtifact.from_dict(doc["artifact"])
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptEntry(f"malformed entry field ({type(e).__name__}: {e})") from None
    if key.schema != doc["schema"]:
        raise CorruptEntry(f"key schema {key.schema} differs from entry schema {doc['schema']}")
    text = artifact.subgraph_text
    if text and hashlib.sha256(text.encode()).hexdigest() != key.subgraph.structure:
        raise CorruptEntry("its subgraph text does not hash to the key's structure hash")
    return Entry(key=key, artifact=artifact, sha256=actual)


def _canonical(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _req(value: Any, kind: type | tuple[type, ...], name: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TypeError(f"field {name!r} has type {type(value).__name__}")
    return value


def _opt(value: Any, kind: type, name: str) -> Any:
    return None if value is None else _req(value, kind, name)


def _opt_number(value: Any, name: str) -> float | None:
    return None if value is None else float(_req(value, (int, float), name))
