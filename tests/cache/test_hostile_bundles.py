"""Kernels from outside are code: a tampered bundle whose digests were recomputed must not run any
of its code — not at import, not when its directory is an extra cache dir at compile time, not
in `kernelpro cache verify`'s own process. "Runs" is proved with a sentinel: the planted source
writes a marker file when imported."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
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
    import argparse
    import io

    from kernelpro_backend.cli.cache import add_cli, run_cli

    def run(*argv):
        parser = argparse.ArgumentParser(prog="kernelpro")
        add_cli(parser.add_subparsers(dest="command", required=True))
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
