"""`kernelpro bench` end to end on the CPU at tiny sizes."""

import json

import pytest
import torch

from kernelpro_backend.bench import plots
from kernelpro_backend.bench.workloads import NAMED_ONLY, TRAINING_WORKLOADS, WORKLOADS

from .conftest import run_cli


@pytest.fixture(scope="module")
def kernelpro_run(tmp_path_factory):
    """Every built-in workload and every sample problem under eager and kernelpro (with the
    eager fallback: no Inductor C++ compiles, so this stays fast on two cores)."""
    out = tmp_path_factory.mktemp("bench")
    from .conftest import PROBLEMS_DIR

    rc = run_cli(
        "bench", "--workload", "all", "--problems", str(PROBLEMS_DIR),
        "--size", "tiny", "--device", "cpu", "--modes", "eager,kernelpro",
        "--kernelpro-fallback", "eager", "--cpu-reps", "2",
        "--json", str(out / "bench.json"), "--markdown", str(out / "bench.md"),
    )  # fmt: skip
    return rc, json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


def test_every_workload_and_mode_is_reported_and_matches_eager(kernelpro_run):
    rc, data, _ = kernelpro_run
    names = [w["workload"] for w in data["workloads"]]
    built_in = [n for n in WORKLOADS if n not in NAMED_ONLY]  # "all" needs no library
    assert names == [*built_in, "kb:gemm_bias_relu", "kb:layer_norm", "kb:softmax"]
    for w in data["workloads"]:
        assert [m["mode"] for m in w["modes"]] == ["eager", "kernelpro"], w["workload"]
        for m in w["modes"]:
            assert m["status"] == "ok", (w["workload"], m)
            assert m["median_ms"] > 0 and m["compile_s"] >= 0
        kp = w["modes"][1]
        used, found = map(int, kp["kernels"].split("/"))  # kernelpro says what it cut and used
        assert found >= 1 and 0 <= used <= found, (w["workload"], kp["kernels"])
        assert w["modes"][0]["kernels"] == ""
        assert kp["speedup_vs_eager"] == pytest.approx(w["modes"][0]["median_ms"] / kp["median_ms"])
    assert rc == 0
    assert data["mode_descriptions"]["kernelpro"] == (
        "torch.compile(backend='kernelpro', options={'fallback': 'eager'})"
    )
    assert data["device"] == "cpu" and data["size"] == "tiny"
    assert set(data["geomean_speedup_vs_eager"]) == {"eager", "kernelpro"}


def test_training_workloads_are_marked_training(kernelpro_run):
    _, data, _ = kernelpro_run
    kinds = {w["workload"]: w["kind"] for w in data["workloads"]}
    assert {n for n, k in kinds.items() if k == "training"} == set(TRAINING_WORKLOADS)


def test_markdown_has_a_row_per_workload_and_mode(kernelpro_run):
    _, data, md = kernelpro_run
    for w in data["workloads"]:
        for mode in ("eager", "kernelpro"):
            assert f"| {w['workload']} | {w['kind']} | float32 | {mode} | ok |" in md


def test_one_inductor_run_matches_eager(tmp_path):
    """The single Inductor compile of the CPU tier (C++ codegen takes seconds per graph)."""
    rc = run_cli(
        "bench", "--workload", "softmax", "--size", "tiny", "--device", "cpu",
        "--modes", "eager,inductor", "--cpu-reps", "2", "--json", str(tmp_path / "b.json"),
    )  # fmt: skip
    data = json.loads((tmp_path / "b.json").read_text())
    modes = {m["mode"]: m for m in data["workloads"][0]["modes"]}
    assert modes["inductor"]["status"] == "ok"
    assert modes["inductor"]["speedup_vs_inductor"] == pytest.approx(1.0)
    assert rc == 0


def test_plots_without_matplotlib_are_skipped_with_a_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plots, "matplotlib_available", lambda: False)
    rc = run_cli(
        "bench", "--workload", "softmax", "--size", "tiny", "--device", "cpu",
        "--modes", "eager", "--cpu-reps", "1", "--plots", str(tmp_path / "plots"),
    )  # fmt: skip
    assert rc == 0
    assert "plots skipped: matplotlib is not installed" in capsys.readouterr().out
    assert not (tmp_path / "plots").exists()


def test_rounds_sets_how_many_interleaved_rounds_each_mode_gets(tmp_path):
    rc = run_cli(
        "bench", "--workload", "softmax", "--size", "tiny", "--device", "cpu",
        "--modes", "eager,kernelpro", "--kernelpro-fallback", "eager", "--cpu-reps", "1",
        "--rounds", "3", "--json", str(tmp_path / "b.json"),
    )  # fmt: skip
    modes = json.loads((tmp_path / "b.json").read_text())["workloads"][0]["modes"]
    assert rc == 0 and [len(m["round_ms"]) for m in modes] == [3, 3]
    with pytest.raises(SystemExit, match="at least one round"):
        run_cli("bench", "--workload", "softmax", "--device", "cpu", "--rounds", "0")


def test_unknown_workload_and_mode_are_usage_errors():
    with pytest.raises(SystemExit, match="unknown workload"):
        run_cli("bench", "--workload", "nope", "--device", "cpu")
    with pytest.raises(SystemExit, match="unknown bench mode"):
        run_cli("bench", "--workload", "softmax", "--device", "cpu", "--modes", "eager,fast")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_a_gpu_says_so():
    with pytest.raises(SystemExit, match="no CUDA GPU"):
        run_cli("bench", "--device", "cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_full_size_ops_on_the_gpu(tmp_path):
    rc = run_cli(
        "bench", "--workload", "softmax", "--workload", "rms_norm", "--size", "full",
        "--device", "cuda", "--modes", "eager,inductor,kernelpro", "--json", str(tmp_path / "g.json"),
    )  # fmt: skip
    data = json.loads((tmp_path / "g.json").read_text())
    for w in data["workloads"]:
        assert all(m["status"] == "ok" for m in w["modes"]), w
    assert rc == 0


def test_a_kernelpro_mode_that_ran_its_fallbacks_code_is_marked_so(kernelpro_run):
    """On the CPU no kernel is installed: where no torch-level rewrite was made either,
    kernelpro ran its fallback's (eager's) own code and the JSON says so; where one was (the
    GPTs' attention), it did not."""
    _, data, md = kernelpro_run
    for w in data["workloads"]:
        kp = w["modes"][1]
        assert kp["fallback"] == "eager", w["workload"]
        plain = kp["kernels"].startswith("0/") and kp["rewrites"] == "none"
        assert kp["same_code_as"] == ("eager" if plain else None), (w["workload"], kp)
    assert any(w["modes"][1]["same_code_as"] is None for w in data["workloads"])
    assert "the same code as eager" in md
