"""`kernelpro cache ls | show | export | import | verify | misses | prune`.

Owns: the argparse wiring of the `cache` subcommand (`add_cli`; `run_cli(args)` is its
`args.func`) and its handlers, printing plain aligned tables (`ls` and `show`: cache_view.py,
`misses`: misses.py; each documents its `--json`).
Must not: hold logic the library lacks (everything here calls store/bundle/maintenance).

`kernelpro cache verify --json` prints one object (keys stable; new keys may be added): kept,
dropped, skipped (counts), dry_run (bool), checked (one object per entry checked: key, pattern,
language, result, stored_ms, measured_ms, reason); nothing else goes to stdout.
"""

from __future__ import annotations

import argparse
import errno
import functools
import json
import re
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from ..cache.bundle import BundleError, Refusal
from ..cache.maintenance import (
    MaintenanceReport,
    Validator,
    ValidatorUnavailable,
    list_entries,
    prune,
    verify,
)
from ..cache.printable import printable
from ..cache.signing import SigningKeyError, load_key, load_keys
from ..cache.store import CacheUnavailable, KernelCache
from ..cache.transfer import export_bundle, import_bundle
from ..options import Options, OptionsError
from ..tuner.admit import admission_note, admit
from .cache_view import ls, show, table
from .errors import trouble
from .misses import print_misses


def add_cli(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Add `cache` with its sub-subcommands to a `kernelpro` argparse subparsers object."""
    p = subparsers.add_parser("cache", help="list, inspect, export, import and clean kernel caches")
    sub = p.add_subparsers(dest="cache_command", required=True)
    lister = sub.add_parser("ls", help="list cached kernels")
    _filters(lister)
    _json(lister)
    show = sub.add_parser("show", help="show one entry (key digest or a unique prefix)")
    show.add_argument("key")
    ex = sub.add_parser("export", help="write entries to a bundle (.tar, .tar.gz, .zip)")
    ex.add_argument("--out", required=True, help="bundle file to write")
    ex.add_argument(
        "--sign",
        metavar="KEYFILE",
        help="sign the bundle (HMAC-SHA256 of its manifest) with this secret key file "
        "(at least 32 random bytes, e.g. `head -c 32 /dev/urandom > key; chmod 600 key`)",
    )
    _filters(ex)
    im = sub.add_parser("import", help="verify a bundle and copy its entries into the cache")
    im.add_argument("file")
    im.add_argument("--arch", help="GPU arch to accept, e.g. sm_90 (default: this machine's)")
    im.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="KEYFILE",
        help="a key file whose signatures you trust (repeatable; added to trusted_bundle_keys)",
    )
    im.add_argument(
        "--require-signature",
        action="store_true",
        help="refuse a bundle without a signature verified by a trusted key "
        "(also: require_signed_bundles)",
    )
    ve = sub.add_parser(
        "verify",
        help="re-validate every entry on this GPU; drop failures",
        description="Rebuilds each entry's reference from its subgraph text, loads the kernel "
        "and proves it again with the search's evaluator on fresh inputs. Entries for another "
        "GPU arch are skipped. With --retime, an entry made elsewhere (imported, another "
        "toolchain or GPU model) that passes is recorded as proved here. Exit status 1 when an "
        "entry failed.",
    )
    ve.add_argument("--dry-run", action="store_true", help="report only; delete nothing")
    _json(ve)
    ve.add_argument(
        "--retime", action="store_true", help="also re-time kernel and baselines; store times"
    )
    ve.add_argument("--seed", type=int, help="input seed (default: a fresh random one)")
    ve.add_argument("--workers", type=int, default=1, help="evaluator worker processes")
    ve.add_argument(
        "--integrity-only", action="store_true", help="check checksums and keys only; run nothing"
    )
    mi = sub.add_parser(
        "misses",
        help="list the subgraphs that ran on the fallback for want of a kernel (dynamic ones "
        "with the sizes they missed at), and what to warm up",
    )
    mi.add_argument("--pattern", help="only this pattern (e.g. softmax)")
    _json(mi)
    pr = sub.add_parser("prune", help="drop corrupt entries (and old ones)")
    pr.add_argument("--older-than", type=float, metavar="DAYS", help="also drop older entries")
    pr.add_argument(
        "--dry-run", action="store_true", help="list what would be dropped; delete nothing"
    )
    p.set_defaults(func=run_cli)
    return p


def _json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object (documented keys)")


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pattern", help="only this pattern (e.g. softmax, addmm+epilogue)")
    p.add_argument("--kind", help="only this kind (gemm, conv, attention, reduction, pointwise)")
    p.add_argument("--arch", help="only this GPU arch (e.g. sm_90)")


def _one_line(run: Callable[..., int]) -> Callable[..., int]:
    """The cache commands' boundary: a cache that cannot be opened, read or written (damaged,
    a directory where a file should be, no permission, a full disk, read-only) or a bad option
    ends the command in one line on stderr saying what is wrong and what to do, exit 1."""

    @functools.wraps(run)
    def guarded(args: argparse.Namespace, *rest: object, **kwargs: object) -> int:
        try:
            return run(args, *rest, **kwargs)
        except (OSError, sqlite3.Error, OptionsError) as e:
            line = f"kernelpro cache {args.cache_command}: {trouble(e, args.cache_dir)}"
            print(line.replace("\n", " "), file=sys.stderr)
            return 1

    return guarded


@_one_line
def run_cli(
    args: argparse.Namespace, validator: Validator | None = None, out: TextIO | None = None
) -> int:
    """Run `kernelpro cache ...`; returns the exit status. `validator` re-checks entries for
    `verify` (default: `CacheEntryValidator`, which runs the evaluator; with
    `--integrity-only`, none)."""
    out = out or sys.stdout
    with KernelCache(args.cache_dir) as cache:
        command = args.cache_command
        if command == "ls":
            return ls(cache, args, out)
        if command == "show":
            return show(cache, args.key, out)
        if command == "export":
            return _export(cache, args, out)
        if command == "import":
            return _import(cache, args, out)
        if command == "misses":
            return print_misses(cache, args.pattern, out, as_json=args.json)
        if command == "verify":
            try:
                return _verify(cache, args, validator, out)
            except ValidatorUnavailable as e:
                print(f"verify stopped, no further entry dropped: {e}", file=out)
                return 2
        if command == "prune":
            try:
                report = prune(cache, args.older_than, dry_run=args.dry_run)
            except ValueError as e:
                print(f"prune refused: {e}", file=out)
                return 2
            return _report(report, "pruned (dry run: nothing deleted)" if args.dry_run
                           else "pruned", out)  # fmt: skip
    raise ValueError(f"unknown cache command {command!r}")


def _export(cache: KernelCache, args: argparse.Namespace, out: TextIO) -> int:
    try:
        key = load_key(args.sign) if args.sign else None
    except SigningKeyError as e:
        print(f"export refused: {e}", file=out)
        return 2
    verdicts = len(cache.context.graph_verdicts())
    if not list_entries(cache, args.pattern, args.kind, args.arch)[0] and not verdicts:
        print(f"no entries match in {cache.directory}; {args.out} not written", file=out)
        return 1
    written = export_bundle(cache, args.out, args.pattern, args.kind, args.arch, key=key)
    signed = f", signed with key id {key.key_id}" if key else ""
    graphs = f" and {verdicts} graph verdict(s)" if verdicts else ""
    print(f"wrote {len(written)} entries{graphs} to {args.out}{signed}", file=out)
    return 0


def _import(cache: KernelCache, args: argparse.Namespace, out: TextIO) -> int:
    options = Options.resolve()
    try:
        keys = load_keys([*options.trusted_bundle_keys, *args.key])
    except SigningKeyError as e:
        print(f"import refused: {e}", file=out)
        return 2
    required = args.require_signature or options.require_signed_bundles
    try:
        # Each entry's code must be this kernelpro's own output (or a cubin) to come in.
        report = import_bundle(cache, args.file, arch=args.arch, admit=admit, keys=keys,
                               require_signature=required)  # fmt: skip
    except BundleError as e:
        print(f"import refused: {printable(e)}", file=out)
        return 1
    except (CacheUnavailable, sqlite3.Error, OptionsError):
        raise  # the cache itself or an option, not the bundle: `_one_line` says what to do
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS):
            print(f"import refused: {printable(args.file)}: {type(e).__name__}: "
                  f"{printable(e)[:300]}", file=out)  # fmt: skip
            return 1
        raise  # a full, read-only or forbidden disk: `_one_line` says what to do
    except Exception as e:  # a bundle is outside data: whatever it breaks ends in one line
        print(f"import refused: {printable(args.file)}: {type(e).__name__}: "
              f"{printable(e)[:300]}", file=out)  # fmt: skip
        return 1
    maker = {k: printable(v) for k, v in report.built_by.items()}
    if maker:
        print(f"bundle made by kernelpro {maker.get('kernelpro', '?')} on GPU "
              f"{maker.get('gpu', '?')}, {maker.get('created', '?')} (as it says)", file=out)  # fmt: skip
    else:
        print("bundle does not say who made it (made before kernelpro recorded it)", file=out)
    print(f"signature: {report.signature}", file=out)
    print(f"imported {len(report.imported)} entries from {printable(args.file)}", file=out)
    if report.imported:
        print("CHECKED says what was checked of each entry's code; none has run here yet. "
              "Each is re-proved against its PyTorch reference and re-timed against the "
              "fallback on this GPU, in an isolated worker, before its first use (or now: "
              "`kernelpro cache verify --retime`):", file=out)  # fmt: skip
        rows = [(e.key.short(), e.artifact.pattern, e.artifact.shown_language,
                 e.artifact.provenance.where(), admission_note(e.artifact))
                for e in report.imported]  # fmt: skip
        print(table(("KEY", "PATTERN", "LANG", "PROVED ON", "CHECKED"), rows), file=out)
    for v in report.graph_verdicts:
        print(printable(f"graph {v.fingerprint[:12]} ({v.model or 'a model'}): compiled with "
              f"{', '.join(f'{k}={val}' for k, val in v.options.items())}, as the bundle's "
              f"warm-up measured it faster ({v.why or 'no figures given'})"), file=out)  # fmt: skip
    if report.refused:
        print(f"refused {len(report.refused)}:", file=out)
        print(table(("ENTRY", "REASON"), [(r.name, r.reason) for r in report.refused]),
              file=out)  # fmt: skip
        _arch_hint(report.refused, args, out)
    return 1 if report.refused else 0


def _arch_hint(refused: Sequence[Refusal], args: argparse.Namespace, out: TextIO) -> None:
    """Entries refused for their GPU arch: how `--arch` takes them in anyway."""
    found = {m.groups() for r in refused if (m := _OTHER_ARCH.match(r.reason))}
    for theirs, ours in sorted(found):
        why = "this machine's" if args.arch is None else "--arch"
        print(f"the bundle's {theirs} kernels run only on a GPU of arch {theirs}, and this cache "
              f"takes {ours} ({why}). To keep them for such a GPU (a cache you copy to it, or "
              f"share with it through extra_cache_dirs), pass --arch {theirs}: kernelpro cache "
              f"import {printable(args.file)} --arch {theirs}", file=out)  # fmt: skip


_OTHER_ARCH = re.compile(r"built for GPU arch (\S+), this cache is for (\S+)$")


def _verify(
    cache: KernelCache, args: argparse.Namespace, validator: Validator | None, out: TextIO
) -> int:
    dry_run = bool(getattr(args, "dry_run", False))
    say = sys.stderr if args.json else out  # with --json, stdout holds the JSON alone
    if validator is not None:
        report = verify(cache, validator, dry_run)
    elif getattr(args, "integrity_only", False):
        print("checking integrity only (no kernel is run)", file=say)
        report = verify(cache, lambda entry: True, dry_run)
    else:
        # Imported here: the validator runs kernels, which the cache package itself must not.
        from ..tuner.verify import CacheEntryValidator

        # The timeouts are options too: KERNELPRO_JOB_TIMEOUT_S, ..._CHECK_TIMING_S, ...
        options = Options.resolve()
        with CacheEntryValidator(
            retime=args.retime,
            seed=args.seed,
            workers=args.workers,
            timeout_s=options.job_timeout_s,
            cache_dir=args.cache_dir or options.cache_dir,
            check_timing_s=options.check_timing_s,
            nvcc_timeout_s=options.nvcc_timeout_s,
            start_timeout_s=options.worker_start_timeout_s,
        ) as entry_validator:
            print(f"validating on {entry_validator.arch}, input seed {entry_validator.seed}",
                  file=say)  # fmt: skip
            report = verify(cache, entry_validator, dry_run)
    if args.json:
        keys = ("key", "pattern", "language", "result", "stored_ms", "measured_ms", "reason")
        checked = [dict(zip(keys, (c.digest, c.pattern, c.language, c.outcome, c.stored_ms,
                                   c.measured_ms, c.reason), strict=True))
                   for c in report.checked]  # fmt: skip
        print(json.dumps({"kept": report.kept, "dropped": len(report.dropped), "skipped":
                          report.skipped, "dry_run": dry_run, "checked": checked}, indent=1),
              file=out)  # fmt: skip
        return 1 if report.dropped else 0
    rows = [
        (c.digest[:12], c.pattern, c.language, c.outcome, c.stored_ms, c.measured_ms, c.reason)
        for c in report.checked
    ]
    if rows:
        headers = ("KEY", "PATTERN", "LANG", "RESULT", "STORED_MS", "NOW_MS", "REASON")
        print(table(headers, rows), file=out)
    verb = "verified (dry run: nothing deleted)" if dry_run else "verified"
    dropped = "would drop" if dry_run else "dropped"
    print(f"{verb}: kept {report.kept}, {dropped} {len(report.dropped)}, "
          f"skipped {report.skipped}", file=out)  # fmt: skip
    return 1 if report.dropped else 0


def _report(report: MaintenanceReport, verb: str, out: TextIO) -> int:
    dropped = "would drop" if report.dry_run else "dropped"
    print(f"{verb}: kept {report.kept}, {dropped} {len(report.dropped)}", file=out)
    if report.dropped:
        rows = [(d.digest[:12], d.pattern, d.reason) for d in report.dropped]
        print(table(("KEY", "PATTERN", "REASON"), rows), file=out)
    return 0
