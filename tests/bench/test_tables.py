import json

from kernelpro_backend.bench import tables
from kernelpro_backend.bench.results import BenchReport, ModeResult, WorkloadResult


def _report():
    modes = [
        ModeResult("eager", "ok", median_ms=2.0, compile_s=0.1),
        ModeResult("inductor", "ok", median_ms=1.0, compile_s=5.0),
        ModeResult("kernelpro", "wrong", median_ms=0.5, compile_s=6.0,
                   max_abs_err=float("inf"), message="out: got (3,)"),
    ]  # fmt: skip
    w = WorkloadResult("softmax", "inference", "float32", "full", "builtin", modes, sol_ms=0.25)
    return BenchReport("cuda", "H100", {"torch": "2.11"}, "full", [m.mode for m in modes], {}, [w])


def test_speedups_sol_and_geomeans():
    r = _report()
    w = r.workloads[0]
    assert w.speedup("inductor", "eager") == 2.0
    assert w.speedup("kernelpro", "eager") is None  # wrong: no speedup
    assert w.sol_fraction("inductor") == 0.25
    assert r.geomean_speedup("inductor", "eager") == 2.0
    assert r.geomean_speedup("kernelpro", "eager") is None


def test_json_is_strict_and_console_lists_what_is_not_ok(tmp_path):
    r = _report()
    tables.write_json(r, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())  # strict parse: no Infinity
    km = data["workloads"][0]["modes"][2]
    assert km["max_abs_err"] == "inf" and km["status"] == "wrong"
    assert data["workloads"][0]["modes"][1]["sol_fraction"] == 0.25
    text = tables.format_console(r)
    assert "softmax / kernelpro: wrong: out: got (3,)" in text
    assert "25.0%" in text and "2.00x" in text
    md = tables.format_markdown(r)
    assert (
        "| softmax | inference | float32 | inductor | ok | 1 | 2.00x | 1.00x | - | 25.0% | - | 5.0 |"
        in md
    )
