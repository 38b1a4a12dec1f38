"""Re-render the Triton sources of bundled kernels from their own KernelSpecs with this
kernelpro's code generator, in place.

    PYTHONPATH=. python scripts/rerender_shipped.py cache/*.tar.gz

A bundle's kernel runs on another machine only if its stored source is what that kernelpro
renders from the entry's spec, or the entry names another generator version and is re-rendered
on load (tuner/admit.py). This stores the re-rendered sources in the bundle itself. Keys,
specs, provenance and measured times stay; each entry's bytes and the manifest's sha256 are
rewritten, and the manifest notes the re-render. The kernels are proved again wherever they are used (and by
tests/cache/test_shipped_bundles.py under the interpreter).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from kernelpro_backend.cache.artifact import encode_entry
from kernelpro_backend.cache.bundle import MANIFEST, read_bundle, write_archive
from kernelpro_backend.cache.transfer import utc_now
from kernelpro_backend.tuner.admit import admit
from kernelpro_backend.version import generator_version


def rerender(path: Path) -> int:
    """Rewrite `path`; returns how many entries' sources changed."""
    bundle = read_bundle(path)
    if bundle.signature is not None:
        raise SystemExit(f"{path} is signed: re-rendering would break its signature")
    by_digest = {e.key.digest: e for e in bundle.entries}
    files: dict[str, bytes] = {}
    changed = 0
    manifest = dict(bundle.manifest)
    listed = []
    for item in manifest["entries"]:
        entry = by_digest[item["digest"]]
        verdict = admit(entry.artifact)  # an older generator's entry: rendered here
        if isinstance(verdict, str):
            raise SystemExit(f"{path}: {entry.key.short()} is refused: {verdict}")
        artifact = entry.artifact if verdict is None else verdict
        changed += verdict is not None
        data = encode_entry(entry.key, artifact)
        files[item["file"]] = data
        listed.append(dict(item, sha256=hashlib.sha256(data).hexdigest()))
    manifest["entries"] = listed
    manifest["sources_rerendered"] = {"date": utc_now(), "generator": generator_version()}
    files[MANIFEST] = json.dumps(manifest, indent=1, sort_keys=True).encode()
    write_archive(path, files)
    return changed


def main(argv: list[str]) -> int:
    for name in argv:
        print(f"{name}: {rerender(Path(name))} source(s) re-rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
