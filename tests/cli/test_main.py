import json
import os
import subprocess
import sys

import pytest
import torch

import kernelpro_backend
from kernelpro_backend.cli.main import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert kernelpro_backend.__version__ in capsys.readouterr().out


def test_help_lists_commands(capsys):
    try:
        main(["--help"])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    assert "explain" in out and "demo" in out


def test_explain_prints_a_table(capsys):
    assert main(["explain", "kernelpro_backend.examples:mlp"]) == 0
    out = capsys.readouterr().out
    assert "forward" in out and "backward" in out and "gemm" in out and "addmm+epilogue" in out


def test_explain_names_the_templates_a_search_measures(capsys):
    """Each subgraph's row says what kernelpro generates for it: a GroupNorm's rows (4 of
    16384 columns) as the Triton row template, the row-resident CUDA kernel and split rows
    (its variance in one Welford pass a chunk), a convolution the implicit GEMM forward and
    backward."""
    from kernelpro_backend import explain

    model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.GroupNorm(2, 8), torch.nn.SiLU()
    )
    rows = explain(model, torch.randn(2, 8, 64, 64))
    norm = next(r for r in rows if r.graph == "forward" and r.pattern == "norm")
    assert norm.templates == ("row_reduction", "row_cluster", "row_split")
    convs = {r.graph: r.templates for r in rows if r.kind == "conv"}
    assert convs == {"forward": ("conv",), "backward": ("conv_backward",)}
    assert main(["explain", "kernelpro_backend.examples:mlp"]) == 0
    assert "templates" in capsys.readouterr().out.splitlines()[0]


def test_explain_under_a_callers_no_grad_still_lists_the_backward():
    """The graphs a training step compiles, also when explain is called inside no_grad (the
    losses it differentiates are made with grad enabled, as the forward was); a Linear on one
    vector lists its GEMM's library alternative (its 1-D output broke that matcher once)."""
    from kernelpro_backend import explain

    model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU())
    with torch.no_grad():
        rows = explain(model, torch.randn(4, 16))
        vector = explain(model, torch.randn(16), train=False)
    assert {r.graph for r in rows} == {"forward", "backward"}
    assert [r.templates for r in vector] == [("gemm", "gemm_library")]


def test_explain_bad_target():
    proc = subprocess.run(
        [sys.executable, "-m", "kernelpro_backend.cli", "explain", "no_such_module:fn"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "cannot import" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only demo")
def test_demo_on_cpu_says_search_needs_a_gpu_and_claims_no_speedup(capsys):
    """Without a GPU nothing is replaced, so the demo must not print a speedup for kernelpro."""
    from kernelpro_backend.bench.demo import run_demo

    assert run_demo(steps=2) == 0  # 0: kernelpro's first loss matched eager's
    out = capsys.readouterr().out
    assert "kernel search needs one" in out and "replaced 0" in out
    assert "not a kernelpro speedup" in out and "x over Inductor" not in out


def tiny_gpt():
    """MODULE:FN target: the bench's hand-written GPT at its tiny size (CPU)."""
    from kernelpro_backend.bench.workloads import mini_gpt

    w = mini_gpt(torch.device("cpu"), torch.float32, "tiny")
    return w.model, w.inputs


def test_explain_shows_the_torch_level_rewrites_a_compile_makes(capsys):
    """[training]: the hand-written attention becomes SDPA (forward and backward subgraphs of
    their own) and the LM head with its loss one op — as the backend's compile sees the model;
    `explain` without them still lists the graphs as written."""
    from kernelpro_backend.explain import explain, explain_model

    model, inputs = tiny_gpt()
    rows, made = explain_model(model, *inputs)
    assert made == {
        "attention": 2, "attention_mask": 0, "attention_mask_layout": 0,
        "linear_cross_entropy": 1, "pad_gemm": 0,
    }  # fmt: skip
    patterns = {(r.graph, r.pattern) for r in rows}
    assert {("forward", "sdpa"), ("backward", "sdpa_backward")} <= patterns
    as_written = {r.pattern for r in explain(model, *inputs)}
    # as written: the scores' GEMM with the mask and softmax as its epilogue, no SDPA
    assert "sdpa" not in as_written and "bmm+epilogue+rowreduce" in as_written
    assert main(["explain", "tests.cli.test_main:tiny_gpt"]) == 0
    out = capsys.readouterr().out
    assert "torch-level rewrites made before the subgraphs were cut:" in out
    assert "2 x hand-written attention" in out and "1 x an LM head and its cross-entropy" in out
    # the tiny GPT keeps its causal mask in a buffer per block: the rewrite relies on its values
    flat = " ".join(out.split())  # as wrapped at whatever width the terminal has
    assert "relied on the values of" in flat and "blocks.0.mask, blocks.1.mask: a causal" in flat
    assert "is_causal=True; checked: its version counter and storage address" in flat, out


def test_explain_json_says_which_inputs_are_relied_on_and_how_they_are_checked(capsys):
    """A mask an earlier graph proved constant, read across a graph break, is listed with the
    check a compile makes on each call; a causal buffer with its own."""
    torch._dynamo.reset()
    assert main(["explain", "tests.test_explain:mask_across_a_break", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["relied_on"] == ["L['mask']"]
    (check,) = found["relied_on_checks"]
    assert set(check) == {"name", "holds", "check"} and check["name"] == "L['mask']"
    assert "proved constant: it attends everywhere" in check["holds"]
    assert "registered output, unwritten since" in check["check"]
    assert main(["explain", "tests.cli.test_main:tiny_gpt", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["relied_on"] == ["blocks.0.mask", "blocks.1.mask"]
    assert all("is_causal=True" in c["holds"] for c in found["relied_on_checks"])


# Each command with the arguments it needs to parse.
COMMANDS = {
    "explain": ["explain", "m:f"],
    "warmup": ["warmup", "m:f"],
    "profile": ["profile", "m:f"],
    "bench": ["bench"],
    "report": ["report", "log.jsonl"],
    "demo": ["demo"],
    **{f"cache {c}": ["cache", c, *rest] for c, rest in [
        ("ls", []), ("show", ["ab"]), ("export", ["--out", "x.tar"]), ("import", ["x.tar"]),
        ("verify", []), ("misses", []), ("prune", [])]},
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_global_options_go_before_or_after_every_command(command):
    from kernelpro_backend.cli.main import build_parser

    argv = COMMANDS[command]
    for where in (["--cache-dir", "D", "-v", *argv], [*argv, "--cache-dir", "D", "-v"],
                  [argv[0], "-v", *argv[1:], "--cache-dir", "D"]):  # fmt: skip
        args = build_parser().parse_args(where)
        assert (args.cache_dir, args.verbose) == ("D", True), where
    args = build_parser().parse_args(argv)
    assert (args.cache_dir, args.verbose) == (None, False)


def _kernelpro(*argv: str, cwd=None, env=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelpro_backend.cli", *argv],
                          capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env)  # fmt: skip


def test_a_bare_kernelpro_prints_its_usage_to_stderr_and_exits_2():
    run = _kernelpro()
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("usage: kernelpro") and "a command is required" in run.stderr


def test_the_cache_dir_given_after_the_command_is_the_one_used(tmp_path):
    run = _kernelpro("cache", "ls", "--cache-dir", str(tmp_path / "c"))
    assert run.returncode == 0 and f"0 entries in {tmp_path / 'c'}" in run.stdout, run.stderr


def test_an_error_is_one_line_and_its_traceback_comes_with_v(tmp_path):
    (tmp_path / "broken_target.py").write_text(
        "def make():\n    raise RuntimeError('the factory broke\\nsecond line')\n"
    )
    run = _kernelpro("explain", "broken_target:make", cwd=tmp_path)
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("kernelpro explain: RuntimeError: the factory broke (")
    assert "-v" in run.stderr and "Traceback" not in run.stderr
    run = _kernelpro("explain", "broken_target:make", "-v", cwd=tmp_path)
    assert run.returncode == 1 and "Traceback" in run.stderr and "second line" in run.stderr


CONV_TARGET = """
import torch

def make():
    model = torch.nn.Sequential(torch.nn.Conv3d(4, 4, 3, padding=1), torch.nn.SiLU())
    return model, (torch.randn(2, 4, 6, 6, 6),)
"""


def test_explain_json_and_its_reasons_whole(tmp_path):
    """--json: the documented keys; the table: a reason longer than a column is numbered and
    printed whole under it, wrapped at the terminal's width, never cut."""
    (tmp_path / "conv_target.py").write_text(CONV_TARGET)
    run = _kernelpro("explain", "conv_target:make", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert set(found) == {
        "subgraphs", "rewrites", "chains", "graph_breaks", "relied_on", "relied_on_checks"
    }  # fmt: skip
    conv = next(s for s in found["subgraphs"] if s["kind"] == "conv")
    assert set(conv) == {"graph", "kind", "pattern", "ops", "inputs", "key", "templates"}
    (reason,) = conv["templates"]
    reason = reason.removeprefix("none: ")
    assert len(reason) > 60  # the table's old cut
    env = {**os.environ, "COLUMNS": "40"}
    run = _kernelpro("explain", "conv_target:make", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    table, _, below = run.stdout.partition("no template (a search times the fallbacks alone):")
    assert "none [1]" in table and reason not in table
    footnote = below.strip().split("\n\n")[0]
    assert " ".join(footnote.split()) == f"[1] {reason}"
    assert max(len(line) for line in footnote.splitlines()) <= 60  # wrapped (60: the floor)
