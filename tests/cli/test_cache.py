"""`kernelpro cache ...` handlers on a temporary cache."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from graphs import python_artifact, with_arch
from helpers import run_cache_cli

from kernelpro_backend.cache import KernelCache, Provenance, Toolchain
from kernelpro_backend.version import __version__


@pytest.fixture
def cache_dir(tmp_path, tanh_sg, linear_sg):
    with KernelCache(tmp_path / "c") as cache:
        for i, sg in enumerate((tanh_sg, linear_sg)):
            artifact = dataclasses.replace(python_artifact(i), pattern=sg.pattern, kind=sg.kind)
            cache.put(with_arch(cache.key_for(sg.key), "sm_90"), artifact)
        yield str(tmp_path / "c"), cache


def test_ls_prints_an_aligned_table(cache_dir, tanh_sg, linear_sg):
    path, cache = cache_dir
    code, text = run_cache_cli("--cache-dir", path, "ls")
    assert code == 0
    lines = text.splitlines()
    header, rows = lines[0], lines[1:3]
    assert header.split() == [
        "KEY", "PATTERN", "KIND", "ARCH", "LANG", "MS", "SPEEDUP", "SOL", "PROVED", "DATE"
    ]  # fmt: skip
    column = header.index("ARCH")
    assert all(r[column:].startswith("sm_90") for r in rows)
    assert {r.split()[1] for r in rows} == {tanh_sg.pattern, linear_sg.pattern}
    assert "2 entries" in lines[3]
    code, text = run_cache_cli("--cache-dir", path, "ls", "--kind", linear_sg.kind)
    assert "1 entries" in text and linear_sg.pattern in text


def test_show_by_prefix(cache_dir):
    path, cache = cache_dir
    entry = next(cache.entries())
    code, text = run_cache_cli("--cache-dir", path, "show", entry.key.digest[:10])
    assert code == 0
    assert entry.key.digest in text and "def scaled_tanh" in text and "sm_90" in text
    code, text = run_cache_cli("--cache-dir", path, "show", "zzzz")
    assert code == 1 and "no entry matching 'zzzz'" in text


@pytest.mark.parametrize(
    ("verdict", "in_ls", "in_show"),
    [
        (
            lambda ctx, d: ctx.reject(d, model="TinyMLP", why="2.4 ms with it, 2.2 without"),
            "1 of them made their model's step slower at warm-up",
            "unused: slower in TinyMLP (2.4 ms with it, 2.2 without)",
        ),
        (
            lambda ctx, d: ctx.hold(d, pattern="pointwise", model="TinyMLP"),
            "1 of them were found by a warm-up whose in-context check",
            "unused: held since a warm-up of TinyMLP found it",
        ),
    ],
    ids=["lost-inside-their-model", "held-by-a-warmup"],
)
def test_ls_and_show_say_which_kernels_run_the_fallback(cache_dir, verdict, in_ls, in_show):
    path, cache = cache_dir
    entry = next(cache.entries())
    verdict(cache.context, entry.key.digest)
    code, text = run_cache_cli("--cache-dir", path, "ls")
    assert code == 0 and in_ls in text
    code, text = run_cache_cli("--cache-dir", path, "show", entry.key.digest[:10])
    assert in_show in text


def test_export_then_import_and_foreign_arch(cache_dir, tmp_path):
    path, _ = cache_dir
    bundle = str(tmp_path / "out" / "kernels.tar.gz")
    code, text = run_cache_cli("--cache-dir", path, "export", "--out", bundle)
    assert code == 0 and "wrote 2 entries" in text
    other = str(tmp_path / "other")
    code, text = run_cache_cli("--cache-dir", other, "import", bundle, "--arch", "sm_90")
    # Plain Python kernels are code from outside: the command line refuses them (tests of
    # spec-built entries coming in: tests/cache/test_hostile_bundles.py).
    assert code == 1 and "imported 0 entries" in text and "refused 2" in text
    assert "'python' kernels from outside are never run" in text
    assert f"bundle made by kernelpro {__version__} on GPU " in text  # its maker, as it says
    code, text = run_cache_cli(
        "--cache-dir", str(tmp_path / "third"), "import", bundle, "--arch", "sm_80"
    )
    assert code == 1
    assert "imported 0 entries" in text and "refused 2" in text
    assert "built for GPU arch sm_90, this cache is for sm_80" in text


def test_a_warmups_graph_verdict_is_exported_even_alone_and_imported_with_its_figures(tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    with KernelCache(src) as cache:
        off = {"rewrite_linear_cross_entropy": False}
        cache.context.set_graph_options("d" * 32, off, model="GPT", why="5.2 ms against 4.9")
    bundle = str(tmp_path / "v.tar.gz")
    code, text = run_cache_cli("--cache-dir", src, "export", "--out", bundle)
    assert code == 0 and "wrote 0 entries and 1 graph verdict(s)" in text, text
    code, text = run_cache_cli("--cache-dir", dst, "import", bundle, "--arch", "sm_90")
    assert code == 0, text
    assert (
        f"graph {'d' * 12} (GPT): compiled with rewrite_linear_cross_entropy=False, as the "
        "bundle's warm-up measured it faster (5.2 ms against 4.9)" in text
    )


def test_verify_drops_entries_the_validator_rejects(cache_dir, tanh_sg, linear_sg):
    path, cache = cache_dir
    code, text = run_cache_cli("--cache-dir", path, "verify", "--integrity-only")
    assert code == 0 and "integrity only" in text and "kept 2, dropped 0" in text

    def validator(entry):
        return entry.artifact.pattern != tanh_sg.pattern

    code, text = run_cache_cli("--cache-dir", path, "verify", validator=validator)
    assert code == 1 and "kept 1, dropped 1" in text and "failed validation" in text
    assert [e.artifact.pattern for e in cache.entries()] == [linear_sg.pattern]


def test_prune_drops_old_and_corrupt_entries_and_keeps_other_toolchains(cache_dir, tanh_sg):
    path, cache = cache_dir
    old_tc = Toolchain("2.0.0", "2.0.0", "11.8")
    other = cache.key_for(tanh_sg.key)
    cache.put(other, python_artifact(toolchain=old_tc))  # re-proved before use, not dropped
    ancient_key = cache.key_for(dataclasses.replace(tanh_sg.key, precision="tf32"))
    ancient = dataclasses.replace(
        python_artifact(), provenance=Provenance(created="2020-01-01T00:00:00+00:00")
    )
    cache.put(ancient_key, ancient)
    cache.put_raw("f" * 64, b"garbage")
    code, text = run_cache_cli("--cache-dir", path, "prune")
    assert code == 0 and "kept 4, dropped 1" in text and "corrupt" in text
    assert cache.get(other) is not None
    code, text = run_cache_cli("--cache-dir", path, "prune", "--older-than", "30")
    assert "kept 3, dropped 1" in text and "days old" in text
    assert cache.get(ancient_key) is None


def _key(tmp_path, name, size=32):
    path = tmp_path / name
    path.write_bytes(bytes(range(size)) if name == "key" else bytes(reversed(range(size))))
    path.chmod(0o600)
    return str(path)


def test_signed_export_and_import_say_the_signature_status(cache_dir, tmp_path):
    path, _ = cache_dir
    key = _key(tmp_path, "key")
    bundle = str(tmp_path / "signed.tar.gz")
    code, text = run_cache_cli("--cache-dir", path, "export", "--out", bundle, "--sign", key)
    assert code == 0 and "wrote 2 entries" in text and "signed with key id " in text
    key_id = text.split("key id ")[1].strip()
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "a"), "import", bundle,
                               "--arch", "sm_90", "--key", key, "--require-signature")  # fmt: skip
    assert f"signature: verified (key id {key_id})" in text and "bundle made by" in text
    assert "refused 2" in text  # python kernels from outside: refused as before, signed or not
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "b"), "import", bundle,
                               "--arch", "sm_90", "--key", _key(tmp_path, "other"))  # fmt: skip
    assert f"signature: unknown key id {key_id}" in text and "bundle made by" in text
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "c"), "import", bundle,
                               "--arch", "sm_90", "--require-signature")  # fmt: skip
    assert code == 1 and "import refused" in text and f"unknown key id {key_id}" in text
    assert "imported" not in text


def test_the_signing_options_apply_to_import(cache_dir, tmp_path, monkeypatch):
    path, _ = cache_dir
    key = _key(tmp_path, "key")
    signed, unsigned = str(tmp_path / "s.tar"), str(tmp_path / "u.tar")
    assert run_cache_cli("--cache-dir", path, "export", "--out", signed, "--sign", key)[0] == 0
    assert run_cache_cli("--cache-dir", path, "export", "--out", unsigned)[0] == 0
    monkeypatch.setenv("KERNELPRO_TRUSTED_BUNDLE_KEYS", key)
    monkeypatch.setenv("KERNELPRO_REQUIRE_SIGNED_BUNDLES", "1")
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "a"), "import", signed,
                               "--arch", "sm_90")  # fmt: skip
    assert "signature: verified" in text and "imported 0 entries" in text
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "b"), "import", unsigned,
                               "--arch", "sm_90")  # fmt: skip
    assert code == 1 and "import refused" in text and "unsigned" in text


def test_unusable_key_files_are_refused_before_anything_is_written(cache_dir, tmp_path):
    path, _ = cache_dir
    out = tmp_path / "b.tar"
    code, text = run_cache_cli("--cache-dir", path, "export", "--out", str(out),
                               "--sign", _key(tmp_path, "short", 16))  # fmt: skip
    assert code == 2 and "export refused" in text and "at least 32" in text
    assert not out.exists()
    run_cache_cli("--cache-dir", path, "export", "--out", str(out))
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "a"), "import", str(out),
                               "--key", str(tmp_path / "absent"))  # fmt: skip
    assert code == 2 and "import refused" in text and "cannot read key file" in text


def test_misses_lists_static_misses_and_the_sizes_each_dynamic_subgraph_missed_at(tmp_path):
    from graphs import tanh_subgraph

    with KernelCache(tmp_path / "c") as cache:
        static = tanh_subgraph((4, 32))
        cache.misses.record(cache.key_for(static.key), static)
        for rows, why in ((24, None), (40, "dynamic sizes 40 not in compile_sizes: not searched")):
            inst = dataclasses.replace(
                tanh_subgraph((rows, 32)), family="f" * 64, dynamic_sizes=(rows,)
            )
            cache.misses.record(cache.key_for(inst.key), inst, why)
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "c"), "misses")
    assert code == 0
    lines = text.splitlines()
    assert lines[0].split() == ["PATTERN", "GRAPH", "KEY", "MISSED", "AT", "MISSES", "WHY"]
    assert "float32[4, 32]" in lines[1]
    assert lines[1].split()[-6:] == ["1", "no", "kernel", "in", "the", "cache"]
    family = lines[2]
    assert "family ffffffffffff" in family and "dynamic sizes 24, 40" in family
    assert "no kernel in the cache; dynamic sizes 40 not in compile_sizes" in family
    assert "3 misses in 2 subgraphs" in text
    assert "kernelpro warmup MODULE:FN --dynamic DIM=24,40" in text
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "c"), "misses", "--pattern", "x")
    assert code == 0 and "0 misses in 0 subgraphs" in text


def _kernelpro(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelpro_backend.cli", *argv],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_ls_json_has_its_documented_keys(cache_dir, tanh_sg):
    path, cache = cache_dir
    run = _kernelpro("cache", "ls", "--json", "--cache-dir", path)
    assert run.returncode == 0, run.stderr
    listing = json.loads(run.stdout)
    assert set(listing) == {"directory", "entries", "corrupt"} and listing["corrupt"] == 0
    assert listing["directory"] == str(cache.directory) and len(listing["entries"]) == 2
    entry = next(e for e in listing["entries"] if e["pattern"] == tanh_sg.pattern)
    assert set(entry) == {"key", "pattern", "kind", "arch", "language", "kernel_ms", "speedup",
                          "sol_fraction", "proved_here", "created", "imported", "in_context"}  # fmt: skip
    assert (entry["arch"], entry["imported"], entry["in_context"]) == ("sm_90", None, "used")
    assert len(entry["key"]) == 64 and entry["proved_here"] is True


def test_misses_json_and_why_there_are_none(tmp_path, tanh_sg):
    empty = str(tmp_path / "empty")
    run = _kernelpro("cache", "misses", "--cache-dir", empty)
    assert run.returncode == 0 and "0 misses in 0 subgraphs" in run.stdout
    assert f"none recorded in {tmp_path / 'empty'}" in run.stdout and "misses.jsonl" in run.stdout
    assert "without a GPU or with search='off' looks nothing up" in run.stdout
    run = _kernelpro("cache", "misses", "--json", "--cache-dir", empty)
    found = json.loads(run.stdout)
    assert (found["misses"], found["subgraphs"], found["sizes"]) == (0, [], [])
    assert found["manifest"].endswith("misses.jsonl") and "none recorded" in found["none_because"]
    with KernelCache(tmp_path / "c") as cache:
        cache.misses.record(cache.key_for(tanh_sg.key), tanh_sg)
    run = _kernelpro("cache", "misses", "--json", "--cache-dir", str(tmp_path / "c"))
    found = json.loads(run.stdout)
    assert found["misses"] == 1 and found["none_because"] is None
    (row,) = found["subgraphs"]
    assert set(row) == {"pattern", "graph", "key", "missed_at", "misses", "why"}
    assert row["pattern"] == tanh_sg.pattern and row["why"] == "no kernel in the cache"
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "c"), "misses", "--pattern", "x")
    assert f"none of pattern 'x'; the manifest's are of {tanh_sg.pattern}" in text


def test_verify_json_is_alone_on_stdout(cache_dir):
    path, _ = cache_dir
    run = _kernelpro("cache", "verify", "--integrity-only", "--json", "--cache-dir", path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert set(report) == {"kept", "dropped", "skipped", "dry_run", "checked"}
    assert (report["kept"], report["dropped"], report["dry_run"]) == (2, 0, False)
    assert "integrity only" in run.stderr


def test_a_refusal_for_another_arch_says_how_to_take_the_kernels_with_arch(cache_dir, tmp_path):
    path, _ = cache_dir
    bundle = str(tmp_path / "k.tar")
    assert run_cache_cli("--cache-dir", path, "export", "--out", bundle)[0] == 0
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "o"), "import", bundle)  # cpu here
    assert code == 1 and "built for GPU arch sm_90, this cache is for " in text
    assert f"pass --arch sm_90: kernelpro cache import {bundle} --arch sm_90" in text


def test_prune_ages_an_imported_entry_from_its_import(tmp_path, tanh_sg, linear_sg):
    """An entry made long ago and imported today is not old; one imported before kernelpro
    recorded imports has only its creation time."""
    from kernelpro_backend.cache.transfer import export_bundle, import_bundle

    long_ago = Provenance(created="2020-01-01T00:00:00+00:00")
    with KernelCache(tmp_path / "src") as src:
        for sg in (tanh_sg, linear_sg):
            old = dataclasses.replace(python_artifact(), provenance=long_ago, pattern=sg.pattern)
            src.put(with_arch(src.key_for(sg.key), "sm_90"), old)
        export_bundle(src, tmp_path / "b.tar")
    with KernelCache(tmp_path / "dst") as dst:
        report = import_bundle(dst, tmp_path / "b.tar", arch="sm_90")  # no admission: a test
        assert len(report.imported) == 2
        before = next(e for e in dst.entries() if e.artifact.pattern == linear_sg.pattern)
        unrecorded = dataclasses.replace(before.artifact.provenance, imported="")
        dst.put(before.key, dataclasses.replace(before.artifact, provenance=unrecorded))
    code, text = run_cache_cli("--cache-dir", str(tmp_path / "dst"), "prune", "--older-than", "30")
    assert code == 0 and "kept 1, dropped 1" in text and linear_sg.pattern in text
    with KernelCache(tmp_path / "dst") as dst:
        (kept,) = dst.entries()
    assert kept.artifact.pattern == tanh_sg.pattern and kept.artifact.provenance.imported


def test_show_marks_a_path_of_the_machine_that_made_the_entry(cache_dir, tmp_path):
    path, cache = cache_dir
    entry = next(cache.entries())
    theirs = "/home/builder/runs/warm/logs/c35fc367.jsonl"
    here = tmp_path / "log.jsonl"
    here.write_text("")
    for log, shown in (
        (theirs, "c35fc367.jsonl (on the machine that made it)"),
        (str(here), str(here)),
    ):
        made = dataclasses.replace(entry.artifact.provenance, search_log=log)
        cache.put(entry.key, dataclasses.replace(entry.artifact, provenance=made))
        code, text = run_cache_cli("--cache-dir", path, "show", entry.key.digest[:10])
        (line,) = [ln for ln in text.splitlines() if ln.startswith("search_log")]
        assert line.split(None, 1)[1] == shown and ("/home/builder" not in text), text
