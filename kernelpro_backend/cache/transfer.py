"""Moving entries between a cache store and a bundle.

Owns: `export_bundle` (a store's entries, optionally filtered, written as a bundle, signed when
given a key) and `import_bundle` (a bundle's verified entries copied into a store, marked
"import" so they are re-proved on this machine before they first run), which refuses, by name
and reason, tampered entries, entries for another GPU architecture, and code that is not this
kernelpro's, and refuses the whole bundle when its signature does not allow it (signing.refusal).
Must not: define or check the bundle format (bundle.py does) or admit code itself (the caller
passes tuner.admit.admit).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from ..version import __version__
from .artifact import Entry, utc_now
from .bundle import (
    BUNDLE_FORMAT,
    GRAPH_VERDICTS,
    MANIFEST,
    BundleError,
    GraphVerdict,
    Refusal,
    read_bundle,
    read_graph_verdicts,
    write_archive,
)
from .signing import SIGNATURE, SignatureStatus, SigningKey, check, refusal, sign
from .store import Admit, KernelCache, admitted
from .toolchain import CACHE_SCHEMA_VERSION, current_arch, current_gpu, current_toolchain


@dataclasses.dataclass(frozen=True)
class ImportReport:
    imported: list[Entry]
    refused: list[Refusal]
    # Who made the bundle, as its manifest says (kernelpro version, GPU, created); empty for
    # bundles from before it was recorded. Claims, not proof: shown, never trusted.
    built_by: dict[str, str] = dataclasses.field(default_factory=dict)
    # The bundle's signature against the keys the caller trusts.
    signature: SignatureStatus = SignatureStatus("unsigned")
    # Graph verdicts taken into the cache's context (rewrites a warm-up measured slower on a
    # whole graph); those the cache had a verdict of its own for are not among them.
    graph_verdicts: list[GraphVerdict] = dataclasses.field(default_factory=list)


def built_by() -> dict[str, str]:
    """What this process would record as a bundle's maker."""
    return {
        "kernelpro": __version__,
        "gpu": current_gpu(),
        "toolchain": str(current_toolchain()),
        "created": utc_now(),
    }


def read_built_by(manifest: dict[str, object]) -> dict[str, str]:
    """The manifest's `built_by`, if it is a small mapping of strings; else empty."""
    raw = manifest.get("built_by")
    if not isinstance(raw, dict) or len(raw) > 16:
        return {}
    return {str(k)[:64]: str(v)[:200] for k, v in raw.items() if isinstance(v, str)}


def export_bundle(
    cache: KernelCache,
    out: str | os.PathLike[str],
    pattern: str | None = None,
    kind: str | None = None,
    arch: str | None = None,
    key: SigningKey | None = None,
) -> list[Entry]:
    """Write the cache's entries, optionally filtered, to a bundle at `out` (.zip for zip,
    .tar.gz/.tgz for gzip'd tar, else tar). Each entry's provenance says where it was proved.
    With `key`, the bundle carries signature.json: an HMAC of the manifest's exact bytes.
    Kernels a warm-up measured slower inside their model, or holds until its in-context check
    judges them (cache/context.py), stay out: a team shipping the bundle ships what made its
    steps faster, not what no step has vouched for (the importing cache could not know). The
    graphs a warm-up measured faster without a torch-level rewrite go too (GRAPH_VERDICTS), so
    the importing machine compiles them as the warm-up's did."""
    chosen = [
        e
        for e in cache.entries()
        if (pattern is None or e.artifact.pattern == pattern)
        and (kind is None or e.artifact.kind == kind)
        and (arch is None or e.key.arch == arch)
        and cache.context.set_aside(e.key.digest) is None
    ]
    chosen.sort(key=lambda e: e.key.digest)
    files: dict[str, bytes] = {}
    listed = []
    for e in chosen:
        data = cache.raw(e.key.digest)
        if data is None:
            continue  # deleted since it was scanned
        name = f"entries/{e.key.digest}.json"
        files[name] = data
        listed.append(
            {
                "file": name,
                "digest": e.key.digest,
                "key": e.key.to_dict(),
                "sha256": hashlib.sha256(data).hexdigest(),
                "pattern": e.artifact.pattern,
                "kind": e.artifact.kind,
            }
        )
    manifest = {
        "format": BUNDLE_FORMAT,
        "schema": CACHE_SCHEMA_VERSION,
        "created": utc_now(),
        "built_by": built_by(),
        "arch": sorted({e.key.arch for e in chosen}),
        "entries": listed,
        GRAPH_VERDICTS: [
            GraphVerdict(
                fingerprint,
                record["options"],
                str(record.get("model", "")),
                str(record.get("why", "")),
            ).to_dict()
            for fingerprint, record in sorted(cache.context.graph_verdicts().items())
        ],
    }
    files[MANIFEST] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    if key is not None:
        files[SIGNATURE] = json.dumps(sign(files[MANIFEST], key), indent=1).encode()
    write_archive(Path(out), files)
    return [e for e in chosen if f"entries/{e.key.digest}.json" in files]


def import_bundle(
    cache: KernelCache,
    path: str | os.PathLike[str],
    arch: str | None = None,
    admit: Admit | None = None,
    keys: Sequence[SigningKey] = (),
    require_signature: bool = False,
) -> ImportReport:
    """Copy a bundle's verified entries for `arch` (default: this machine's GPU) into the cache,
    marked as imported: the finder re-proves and re-times each on this machine before it first
    runs (whatever toolchain or GPU model made it). Everything else is refused with its reason.
    `admit` (tuner.admit.admit): refuses an entry whose code did not come out of this kernelpro;
    the command line always passes it. The signature is checked against `keys` before anything
    is stored: BundleError when it is bad, or when `require_signature` and it is not verified."""
    arch = arch or current_arch()
    bundle = read_bundle(path)
    status = check(bundle, keys)
    problem = refusal(status, require_signature)
    if problem:
        raise BundleError(f"{path}: {problem}")
    imported: list[Entry] = []
    refused = list(bundle.refused)
    for entry in bundle.entries:
        name = f"entries/{entry.key.digest}.json ({entry.artifact.pattern or 'unnamed'})"
        if entry.key.arch != arch:
            refused.append(
                Refusal(name, f"built for GPU arch {entry.key.arch}, this cache is for {arch}")
            )
        elif (found := admitted(admit, entry.artifact))[0] is None:
            refused.append(Refusal(name, found[1]))
        else:
            made = dataclasses.replace(found[0].provenance, origin="import", imported=utc_now())
            artifact = dataclasses.replace(found[0], provenance=made)
            cache.put(entry.key, artifact)
            imported.append(dataclasses.replace(entry, artifact=artifact))
    verdicts, bad = read_graph_verdicts(bundle.manifest)
    refused += bad
    own = cache.context.graph_verdicts()
    taken = [v for v in verdicts if v.fingerprint not in own]
    if taken:  # a verdict measured here stays: this machine's own timing
        cache.context.add_graph_options(
            (v.fingerprint, v.options, {"model": v.model, "why": v.why, "origin": "import"})
            for v in taken
        )
    return ImportReport(imported, refused, read_built_by(bundle.manifest), status, taken)
