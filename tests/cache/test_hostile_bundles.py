"""Kernels from outside are code: a tampered bundle whose digests were recomputed must not run any
of its code — not at import, not when its directory is an extra cache dir at compile time, not
in `kernelpro cache verify`'s own process. "Runs" is proved with a sentinel: the planted source
writes a marker file when imported."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from archives import write_gzip_bomb, write_many_directories, write_many_members
from graphs import trace

from kernelpro_backend.cache import KernelArtifact, KernelCache, export_bundle, import_bundle
from kernelpro_backend.cache.artifact import Entry
from kernelpro_backend.cache.entries import describe
from kernelpro_backend.codegen import render
from kernelpro_backend.lowering import lower
from kernelpro_backend.options import Options
from kernelpro_backend.tuner.admit import admit
from kernelpro_backend.tuner.finder import KernelFinder
from kernelpro_backend.tuner.verify import CacheEntryValidator


def _scaled_tanh(x):
    return torch.tanh(x) * 3.0 + 1.0


@pytest.fixture(scope="module")
def honest():
    """A spec-built Triton entry exactly as this kernelpro renders it, and its subgraph."""
    (sg,) = trace(_scaled_tanh, torch.randn(8, 32))
    spec = lower(sg)
    r = render(spec)
    return sg, describe(KernelArtifact(r.language, r.source, r.entry, spec_json=spec.to_json()), sg)


def _planted(artifact: KernelArtifact, marker) -> KernelArtifact:
    """The same entry with a line of host code that leaves `marker` behind when imported."""
    line = f"open({str(marker)!r}, 'w').write('ran')\n"
    return dataclasses.replace(artifact, source=line + artifact.source)


def _bundle_of(tmp_path, sg, artifact, name="shared") -> tuple:
    """A self-consistent bundle (manifest digests recomputed by export) holding `artifact`."""
    with KernelCache(tmp_path / f"attacker-{name}") as made:
        key = made.key_for(sg.key)
        made.put(key, artifact)
        out = tmp_path / name / "kernels.tar.gz"
        out.parent.mkdir()
        assert len(export_bundle(made, out)) == 1
    return key, out


def test_an_honest_spec_entry_is_admitted(honest):
    assert admit(honest[1]) is None


def test_a_tampered_bundle_is_refused_at_import_and_nothing_runs(tmp_path, honest):
    sg, artifact = honest
    marker = tmp_path / "marker"
    key, bundle = _bundle_of(tmp_path, sg, _planted(artifact, marker))
    with KernelCache(tmp_path / "victim") as cache:
        report = import_bundle(cache, bundle, arch=key.arch, admit=admit)
        assert report.imported == [] and len(report.refused) == 1
        assert "not what this kernelpro renders" in report.refused[0].reason
        assert cache.get(key) is None
    assert not marker.exists()


def test_a_tampered_extra_dir_entry_is_not_loaded_at_compile_time(tmp_path, honest, caplog):
    sg, artifact = honest
    marker = tmp_path / "marker"
    _, bundle = _bundle_of(tmp_path, sg, _planted(artifact, marker))
    options = Options(cache_dir=str(tmp_path / "victim"), extra_cache_dirs=(str(bundle.parent),))
    finder = KernelFinder.from_options(options)
    assert finder.find(sg) is None  # the fallback runs
    assert not marker.exists()
    assert "not what this kernelpro renders" in caplog.text
    # The honest entry from the same place is found (admission is not a blanket refusal).
    _, good = _bundle_of(tmp_path, sg, artifact, name="honest")
    cache = KernelCache(str(tmp_path / "victim2"), (str(good.parent),), admit=admit)
    assert cache.get(cache.key_for(sg.key)) == artifact


def _from_another_generator(artifact):
    toolchain = dataclasses.replace(artifact.provenance.toolchain, generator="0.0.1+older")
    provenance = dataclasses.replace(artifact.provenance, toolchain=toolchain)
    return dataclasses.replace(artifact, provenance=provenance)


def test_an_entry_of_another_generator_runs_the_source_rendered_here(tmp_path, honest):
    """A cache shipped by an older kernelpro survives the upgrade: its spec-built entries are
    admitted with their sources rendered by this generator; what they stored never runs, not
    even at import (here: a planted line that would leave a marker)."""
    sg, artifact = honest
    marker = tmp_path / "marker"
    older = _from_another_generator(_planted(artifact, marker))
    verdict = admit(older)
    assert not isinstance(verdict, str) and verdict is not None
    assert (verdict.source, verdict.entry) == (artifact.source, artifact.entry)
    key, bundle = _bundle_of(tmp_path, sg, older)
    with KernelCache(tmp_path / "victim") as cache:
        report = import_bundle(cache, bundle, arch=key.arch, admit=admit)
        assert len(report.imported) == 1 and report.refused == []
        stored = cache.get(key)
        assert stored is not None and stored.source == artifact.source
    cache = KernelCache(str(tmp_path / "victim2"), (str(bundle.parent),), admit=admit)
    found = cache.get(cache.key_for(sg.key))
    assert found is not None and found.source == artifact.source
    assert not marker.exists()


def test_verify_never_runs_an_entry_in_its_own_process(tmp_path, honest):
    sg, artifact = honest
    marker = tmp_path / "marker"
    with KernelCache(tmp_path / "c") as cache:
        key = cache.key_for(sg.key)
        cache.put(key, _planted(artifact, marker))
        (entry,) = list(cache.entries())
    jobs = []

    def evaluate(batch):  # stands in for the worker pool: records what it would run elsewhere
        jobs.extend(batch)
        from kernelpro_backend.runtime.result import EvalResult, EvalStatus

        return [EvalResult(EvalStatus.OK, median_ms=0.01) for _ in batch]

    verdict = CacheEntryValidator(evaluate=evaluate, arch=key.arch)(
        Entry(key, entry.artifact, sha256="")
    )
    assert verdict.status == "ok" and len(jobs) == 1
    assert jobs[0].candidate.source == entry.artifact.source  # the worker proves stored bytes
    assert not marker.exists()


def test_a_spec_with_code_in_its_strings_is_refused(honest):
    _, artifact = honest
    raw = json.loads(artifact.spec_json)
    raw["template"] = "pointwise'); import os; ('"
    odd = dataclasses.replace(artifact, spec_json=json.dumps(raw))
    assert "not a plain token" in (admit(odd) or "")


def test_other_languages_from_outside_are_refused(honest):
    _, artifact = honest
    python = dataclasses.replace(artifact, language="python", spec_json=None)
    assert "never run" in (admit(python) or "")
    cuda = dataclasses.replace(artifact, language="cuda", spec_json=None, binary=None)
    assert "without its cubin" in (admit(cuda) or "")
    assert admit(dataclasses.replace(cuda, binary=b"\x7fELF")) is None  # device code only


def test_the_command_line_imports_an_honest_bundle_and_refuses_a_tampered_one(tmp_path, honest):
    import io

    from kernelpro_backend.cli.cache import run_cli
    from kernelpro_backend.cli.main import build_parser

    def run(*argv):
        parser = build_parser()
        out = io.StringIO()
        return run_cli(parser.parse_args(["cache", *argv]), out=out), out.getvalue()

    sg, artifact = honest
    key, good = _bundle_of(tmp_path, sg, artifact, name="honest")
    victim = str(tmp_path / "victim")
    code, text = run("--cache-dir", victim, "import", str(good), "--arch", key.arch)
    assert code == 0 and "imported 1 entries" in text, text
    marker = tmp_path / "marker"
    _, bad = _bundle_of(tmp_path, sg, _planted(artifact, marker), name="tampered")
    code, text = run("--cache-dir", str(tmp_path / "v2"), "import", str(bad), "--arch", key.arch)
    assert code == 1 and "imported 0 entries" in text and "not what this kernelpro" in text
    assert not marker.exists()


# -- bounded reads: each hostile bundle is refused quickly, in little memory, and never breaks
# a compile ---------------------------------------------------------------------------------
_MEASURE = """
import json, sys, time
from kernelpro_backend.cache import KernelCache, import_bundle
from kernelpro_backend.cache.bundle import BundleError
from kernelpro_backend.tuner.admit import admit

def status_kb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

with KernelCache(sys.argv[2]) as cache:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak (VmHWM) to the current RSS: imports do not count
    before = status_kb("VmRSS")
    start = time.monotonic()
    try:
        report = import_bundle(cache, sys.argv[1], arch=sys.argv[3], admit=admit)
        why, imported = "; ".join(r.reason for r in report.refused), len(report.imported)
    except BundleError as e:
        why, imported = str(e), 0
    seconds = time.monotonic() - start
    peak = status_kb("VmHWM")
print(json.dumps({"seconds": seconds, "grew_mb": (peak - before) / 1024, "why": why,
                  "imported": imported}))
"""


def _deep_spec(tmp_path, honest):
    sg, artifact = honest
    deep = dataclasses.replace(artifact, spec_json="[" * 50_000 + "]" * 50_000)
    return _bundle_of(tmp_path, sg, deep, name="deep")[1]


def _star_args(tmp_path, honest):
    sg, artifact = honest
    marker = tmp_path / "star-marker"
    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        f"def entry(x, *rest: open({str(marker)!r}, 'w').write('ran')):\n    pass\n"
    )
    free = dataclasses.replace(artifact, source=source, entry="entry", spec_json=None)
    return _bundle_of(tmp_path, sg, free, name="star")[1]


def _archive(writer, name):
    def make(tmp_path, honest):
        path = tmp_path / name.split(".")[0] / name
        path.parent.mkdir()
        writer(path)
        return path

    return make


HOSTILE = {
    "deep_spec": (_deep_spec, "nested more than 32 deep"),
    "star_args_annotation": (_star_args, "*rest, annotated"),
    "members_100000": (_archive(lambda p: write_many_members(p, 100_000), "many.tar"),
                       "limit MAX_MEMBERS"),
    "directories_1000000": (
        _archive(lambda p: write_many_directories(p, 1_000_000), "dirs.tar.gz"),
        "limit MAX_MEMBERS",
    ),
    "gzip_bomb": (_archive(lambda p: write_gzip_bomb(p, 100, 15 * 2**20), "bomb.tar.gz"),
                  "limit MAX_BUNDLE_BYTES"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_bundle_is_refused_in_under_2_s_and_200_mb(tmp_path, honest, case):
    """Measured in a fresh process: its wall time, and its peak RSS (reset before the read)
    over its RSS before."""
    import subprocess
    import sys

    make, reason = HOSTILE[case]
    path = make(tmp_path, honest)
    arch = KernelCache(tmp_path / "k").key_for(honest[0].key).arch
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), str(tmp_path / "victim"), arch],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["imported"] == 0 and reason in got["why"], got
    assert got["seconds"] < 2.0 and got["grew_mb"] < 200, got
    assert not (tmp_path / "star-marker").exists()


def test_a_compile_with_every_hostile_bundle_runs_and_warns_once_per_bundle(
    tmp_path, honest, caplog
):
    import logging

    from kernelpro_backend.backend import make_backend

    paths = {case: make(tmp_path, honest) for case, (make, _) in HOSTILE.items()}
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh())
    x = torch.randn(4, 16)
    options = {"search": "cache-only", "fallback": "eager", "cache_dir": str(tmp_path / "kp"),
               "extra_cache_dirs": [str(p.parent) for p in paths.values()]}  # fmt: skip
    torch._dynamo.reset()
    # The finder that serves a GPU compile, here on the CPU (no prover: nothing is admitted).
    backend = make_backend(provider=KernelFinder.from_options)
    compiled = torch.compile(model, backend=backend, options=options)
    with caplog.at_level(logging.WARNING, logger="kernelpro"):
        got = compiled(x)
    torch.testing.assert_close(got, model(x), rtol=0, atol=0)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    for case, path in paths.items():
        naming = [w for w in warnings if str(path) in w]
        assert len(naming) == 1 and HOSTILE[case][1] in naming[0], (case, naming)
    assert not (tmp_path / "star-marker").exists()


def test_escape_sequences_from_a_bundle_are_printed_escaped(tmp_path, honest):
    import io

    from kernelpro_backend.cli.cache import run_cli
    from kernelpro_backend.cli.main import build_parser

    sg, artifact = honest
    evil = "pointwise\x1b]0;owned\x07\x1b[2J\u202e"
    _, bundle = _bundle_of(tmp_path, sg, dataclasses.replace(artifact, pattern=evil))
    victim = str(tmp_path / "victim")
    parser = build_parser()
    key = KernelCache(tmp_path / "k").key_for(sg.key)
    texts = []
    for argv in (["import", str(bundle), "--arch", key.arch], ["ls"], ["show", key.digest[:12]]):
        out = io.StringIO()
        run_cli(parser.parse_args(["cache", "--cache-dir", victim, *argv]), out=out)
        texts.append(out.getvalue())
    for text in texts:
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
        assert "pointwise\\x1b]0;owned\\x07\\x1b[2J\\u202e" in text, text
    assert "re-rendered from its spec and identical" in texts[0]


FREE_FORM = (
    "import torch\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n"
    "def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr = 128):\n"
    "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 3.0 + 1.0, mask=i < n)\n\n\n"
    "def entry(in0):\n    out0 = torch.empty_like(in0)\n"
    "    scale[(triton.cdiv(in0.numel(), 128),)](in0, out0, in0.numel())\n    return [out0]\n"
)


def test_require_signed_bundles_keeps_unsigned_free_form_code_out(tmp_path, honest, caplog):
    """A free-form source that fits the grammar is admitted (and says so); with
    require_signed_bundles an unsigned bundle holding it is refused at import and skipped as
    an extra cache dir: no free-form code the user did not sign reaches a worker."""
    import io
    import logging

    from kernelpro_backend.cli.cache import run_cli
    from kernelpro_backend.cli.main import build_parser

    sg, artifact = honest
    free = dataclasses.replace(artifact, source=FREE_FORM, entry="entry", spec_json=None)
    key, bundle = _bundle_of(tmp_path, sg, free)
    parser = build_parser()

    def run(*argv):
        out = io.StringIO()
        code = run_cli(parser.parse_args(["cache", *argv]), out=out)
        return code, out.getvalue()

    code, text = run("--cache-dir", str(tmp_path / "a"), "import", str(bundle), "--arch", key.arch)
    assert code == 0 and "admitted by the source grammar; runs only in isolated workers" in text
    code, text = run("--cache-dir", str(tmp_path / "b"), "import", str(bundle), "--arch",
                     key.arch, "--require-signature")  # fmt: skip
    assert code == 1 and "a verified signature is required" in text
    with caplog.at_level(logging.WARNING, logger="kernelpro.cache"):
        signed_only = KernelCache(str(tmp_path / "c"), (str(bundle.parent),), admit=admit,
                                  require_signed=True)  # fmt: skip
        assert signed_only.get(key) is None
        assert KernelCache(str(tmp_path / "d"), (str(bundle.parent),), admit=admit).get(key)
    assert "a verified signature is required" in caplog.text
