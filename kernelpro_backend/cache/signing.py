"""Bundle signatures: an HMAC-SHA256 over a bundle's manifest, with a shared secret key file.

Owns: the `signature.json` member's format ({"format", "alg", "key_id", "mac"}, the MAC over
the exact bytes of manifest.json, which lists every entry's sha256, so it covers every entry),
reading key files (raw bytes, at least MIN_KEY_BYTES; a warning when others can read one),
`sign`, `parse_signature`, `check` (a bundle's `SignatureStatus` against trusted keys) and
`refusal` (the one rule for when a status keeps a bundle out).
Must not: read or write archives (bundle.py and transfer.py do), or import bundle.py (which
imports this module); the standard library and logs/ only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

from ..logs import warn

SIGNATURE = "signature.json"
SIGNATURE_FORMAT = "kernelpro-signature"
ALG = "hmac-sha256"
MIN_KEY_BYTES = 32
MAX_KEY_BYTES = 64 * 1024  # a key file is a secret, not a data file
MAX_SIGNATURE_BYTES = 4096  # ours are about 200 bytes
_FIELDS = {"format", "alg", "key_id", "mac"}
_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


class SigningKeyError(ValueError):
    """A key file cannot be used: unreadable, too short or too long."""


@dataclasses.dataclass(frozen=True)
class SigningKey:
    """A shared secret read from a key file; its id is public, the secret never printed."""

    path: str
    secret: bytes = dataclasses.field(repr=False)

    @property
    def key_id(self) -> str:
        return key_id(self.secret)


@dataclasses.dataclass(frozen=True)
class SignatureStatus:
    """What a bundle's signature says against the trusted keys."""

    state: Literal["unsigned", "verified", "unknown key", "bad signature"]
    key_id: str | None = None

    @property
    def verified(self) -> bool:
        return self.state == "verified"

    def __str__(self) -> str:
        if self.state == "verified":
            return f"verified (key id {self.key_id})"
        if self.state == "unknown key":
            return f"unknown key id {self.key_id} (signed with a key not trusted here)"
        if self.state == "bad signature":
            return f"bad signature (key id {self.key_id}: the manifest or an entry was modified)"
        return "unsigned"


class Signed(Protocol):
    """What `check` reads of a bundle (bundle.Bundle)."""

    @property
    def manifest_bytes(self) -> bytes: ...

    @property
    def signature(self) -> Mapping[str, str] | None: ...


def key_id(secret: bytes) -> str:
    """The first 16 hex digits of the key's sha256: names the key without revealing it."""
    return hashlib.sha256(secret).hexdigest()[:16]


def load_key(path: str | os.PathLike[str]) -> SigningKey:
    """Read a key file (raw bytes, at least MIN_KEY_BYTES); warn when group or others may read
    it, as ssh does."""
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
            raise SigningKeyError(f"key file {path} is not a regular file")
        with open(path, "rb") as f:
            secret = f.read(MAX_KEY_BYTES + 1)
    except OSError as e:
        raise SigningKeyError(f"cannot read key file {path}: {e.strerror or e}") from None
    if len(secret) > MAX_KEY_BYTES:
        raise SigningKeyError(f"key file {path} is over {MAX_KEY_BYTES} bytes; not a key")
    if len(secret) < MIN_KEY_BYTES:
        raise SigningKeyError(
            f"key file {path} holds {len(secret)} bytes; a key needs at least {MIN_KEY_BYTES} "
            f"random bytes (e.g. `head -c 32 /dev/urandom > {path}; chmod 600 {path}`)"
        )
    if stat.S_IMODE(mode) & 0o077:
        warn(
            f"key file {path} is readable by group or others (mode {stat.S_IMODE(mode):o}); "
            f"anyone who reads it can sign bundles you trust: chmod 600 {path}"
        )
    return SigningKey(str(path), secret)


def load_keys(paths: Iterable[str | os.PathLike[str]]) -> list[SigningKey]:
    return [load_key(p) for p in paths]


def sign(manifest_bytes: bytes, key: SigningKey) -> dict[str, str]:
    """The signature member's content for these exact manifest bytes."""
    return {"format": SIGNATURE_FORMAT, "alg": ALG, "key_id": key.key_id,
            "mac": _mac(manifest_bytes, key.secret)}  # fmt: skip


def parse_signature(data: bytes) -> dict[str, str]:
    """The signature member's fields, checked; ValueError says what is wrong with it."""
    if len(data) > MAX_SIGNATURE_BYTES:
        raise ValueError(f"{len(data)} bytes, over {MAX_SIGNATURE_BYTES}; not a signature")
    try:
        raw: Any = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"unparsable ({e})") from None
    except RecursionError:
        raise ValueError("nested too deeply to be ours") from None
    if not isinstance(raw, dict) or set(raw) != _FIELDS:
        raise ValueError(f"expected an object with exactly the fields {sorted(_FIELDS)}")
    if raw["format"] != SIGNATURE_FORMAT:
        raise ValueError(f"format {raw['format']!r:.40}, expected {SIGNATURE_FORMAT!r}")
    if raw["alg"] != ALG:
        raise ValueError(f"algorithm {raw['alg']!r:.40}; this kernelpro checks only {ALG!r}")
    for field, pattern in (("key_id", _HEX16), ("mac", _HEX64)):
        if not isinstance(raw[field], str) or not pattern.fullmatch(raw[field]):
            raise ValueError(f"{field} {raw[field]!r:.80} is not {pattern.pattern} lowercase hex")
    return {name: raw[name] for name in sorted(_FIELDS)}


def check(bundle: Signed, keys: Iterable[SigningKey]) -> SignatureStatus:
    """The bundle's signature status against `keys` (the keys this user trusts)."""
    signature = bundle.signature
    if signature is None:
        return SignatureStatus("unsigned")
    wanted = signature["key_id"]
    matching = [k for k in keys if k.key_id == wanted]
    if not matching:
        return SignatureStatus("unknown key", wanted)
    for key in matching:
        if hmac.compare_digest(_mac(bundle.manifest_bytes, key.secret), signature["mac"]):
            return SignatureStatus("verified", wanted)
    return SignatureStatus("bad signature", wanted)


def refusal(status: SignatureStatus, required: bool) -> str | None:
    """Why a bundle with this status must not be used, or None. A bad signature (a trusted key,
    a MAC that does not match) is always refused: the bundle was modified after signing. With
    `required`, anything but a verified signature is refused."""
    if status.state == "bad signature":
        return f"signature: {status}"
    if required and not status.verified:
        return f"signature: {status}; a verified signature is required (require_signed_bundles)"
    return None


def _mac(manifest_bytes: bytes, secret: bytes) -> str:
    return hmac.new(secret, manifest_bytes, hashlib.sha256).hexdigest()
