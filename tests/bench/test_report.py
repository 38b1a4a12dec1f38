"""`kernelpro report`: a search log in the shared JSON-lines format -> one HTML page."""

import json

import pytest

from kernelpro_backend.bench.report import best_speedup_series, parse_log

from .conftest import run_cli


def _finding(metric, guidance, severity="high", suggestion=None):
    return {
        "tool": "ncu", "metric": metric, "value": 91.5, "threshold": 80.0,
        "severity": severity, "guidance": guidance, "suggestion": suggestion or {},
    }  # fmt: skip


def _trial(tid, parent, move, status, ms, speedup, findings=()):
    return {
        "event": "trial", "id": tid, "parent": parent, "move": move, "status": status,
        "candidate": {"template": "row_softmax", "knobs": [["block", 64 * (tid + 1)]]},
        "median_ms": ms, "speedup": speedup, "sol_fraction": 0.4 if ms else None,
        "reward": speedup or 0.0, "findings": list(findings),
    }  # fmt: skip


EVENTS = [
    {"event": "start", "subgraph": "ab12cd", "pattern": "softmax", "kind": "reduction",
     "sol_ms": 0.011, "baselines": {"eager": 0.05, "inductor": 0.03},
     "budget": {"budget_s": 120, "max_trials": 64}, "time": "2026-11-22T04:00:00"},
    _trial(0, None, "lower", "ok", 0.04, 0.75,
           [_finding("dram_throughput_pct", "Memory-bound at 91% of DRAM bandwidth: fuse reads.",
                     suggestion={"vector_width": 8})]),
    _trial(1, 0, "vector_width=8", "ok", 0.025, 1.2,
           [_finding("achieved_occupancy", "Occupancy 25% <b>low</b>: fewer registers.", "medium")]),
    _trial(2, 0, "num_warps=16", "wrong", None, None),
    _trial(3, 1, "num_stages=3", "ok", 0.02, 1.5),
    _trial(4, 3, "block=512", "ok", 0.022, 1.36),
    {"event": "end", "winner": 3, "best_ms": 0.02, "speedup_vs_inductor": 1.5, "trials": 5,
     "trials_saved_by_sol": 1, "reason": "budget"},
    {"event": "start", "subgraph": "ef34", "pattern": "addmm+epilogue", "kind": "gemm",
     "sol_ms": None, "baselines": {"eager": 1.0, "inductor": 0.9}, "budget": {}, "time": "t"},
    _trial(0, None, "lower", "compile_error", None, None,
           [_finding("ptxas_spills", "Registers spill to local memory.", "low")]),
]  # fmt: skip


@pytest.fixture
def log_file(tmp_path):
    path = tmp_path / "search.jsonl"
    lines = [json.dumps(e) for e in EVENTS] + ['{"event": "trial", "id": 9, "par']  # cut off
    path.write_text("\n".join(lines) + "\n")
    return path


def test_html_holds_every_node_and_finding_nested_by_parent(log_file, tmp_path):
    out = tmp_path / "report.html"
    assert run_cli("report", str(log_file), "--out", str(out)) == 0
    page = out.read_text()
    for e in EVENTS:
        if e["event"] == "trial":
            assert f"<b>#{e['id']}</b> {e['move']}" in page
            for f in e["findings"]:
                assert f"ncu.{f['metric']}" in page
    assert "Memory-bound at 91% of DRAM bandwidth: fuse reads." in page
    assert "Occupancy 25% &lt;b&gt;low&lt;/b&gt;" in page  # escaped, not markup
    assert "&quot;vector_width&quot;: 8" in page
    # Nesting: #3 is inside #1's list, which is inside #0's.
    i0, i1, i3, i4 = (page.index(f'id="trial-{i}"') for i in (0, 1, 3, 4))
    assert i0 < i1 < i3 < i4
    assert page[i1:i3].count("<ul>") >= 1
    assert page.count('<section id="search-') == 2
    assert "softmax" in page and "addmm+epilogue" in page and "winner" in page
    assert "no end event" in page  # the second search never ended
    assert "line 10: not JSON" in page
    assert (
        "<svg" in page
        and "<script" not in page
        and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )


def test_chart_is_well_formed_svg_with_one_dot_per_ok_trial(log_file, tmp_path):
    import xml.etree.ElementTree as ET

    out = tmp_path / "r.html"
    run_cli("report", str(log_file), "--out", str(out))
    page = out.read_text()
    svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(f"{ns}circle")) == 4  # trials 0, 1, 3, 4 were ok with a speedup
    assert len(root.findall(f"{ns}path")) == 1


def test_best_speedup_is_a_running_max_over_ok_trials():
    searches = parse_log("\n".join(json.dumps(e) for e in EVENTS)).searches
    assert best_speedup_series(searches[0].trials) == [
        (1.0, 0.75), (2.0, 1.2), (3.0, 1.2), (4.0, 1.5), (5.0, 1.5),
    ]  # fmt: skip
    assert best_speedup_series(searches[1].trials) == []


def test_parent_cycles_do_not_lose_or_loop_nodes():
    trials = [_trial(0, 1, "a", "ok", 1.0, 1.0), _trial(1, 0, "b", "ok", 1.0, 1.1)]
    from kernelpro_backend.bench.report import ParsedLog, SearchLog, render_html

    page = render_html(ParsedLog([SearchLog(None, trials, None)], []), "cycle")
    assert page.count('id="trial-0"') == 1 and page.count('id="trial-1"') == 1


def test_a_log_without_events_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert run_cli("report", str(empty)) == 2
    assert "holds no search events" in capsys.readouterr().err
    assert run_cli("report", str(tmp_path / "missing.jsonl")) == 2


def test_a_node_says_which_profiling_tools_ran_and_why_others_did_not(tmp_path):
    trial = _trial(0, None, "lower", "ok", 0.04, 0.75)
    trial["tools_run"] = ["ptxas"]
    trial["tools_skipped"] = [["sass", "cuobjdump <not> found"]]
    failed = {**_trial(1, 0, "num_warps:up", "ok", 0.03, 1.0), "feedback_error": "OSError: x"}
    path = tmp_path / "search.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in [EVENTS[0], trial, failed]) + "\n")
    out = tmp_path / "report.html"
    assert run_cli("report", str(path), "--out", str(out)) == 0
    page = out.read_text()
    assert "profiled with ptxas; skipped sass (cuobjdump &lt;not&gt; found)" in page
    assert "feedback failed: OSError: x" in page


def test_the_report_shows_fixed_costs_phases_and_why_a_search_stopped(tmp_path):
    start = {**EVENTS[0], "fixed_s": {"pool_start": 4.5, "baselines": 9.25}}
    trial = {
        **_trial(0, None, "lower", "ok", 0.04, 0.75),
        "phase_s": {"compile": 1.5, "time": 0.25},
    }
    end = {
        "event": "end", "trials": 1, "reason": "max_seconds", "search_s": 31.0,
        "trials_per_s": 0.032, "phase_s": {"compile": 1.5, "time": 0.25},
        "why": "max_seconds after 1 trial: it took 31.0 s of the 30 s budget",
    }  # fmt: skip
    path = tmp_path / "search.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in [start, trial, end]) + "\n")
    out = tmp_path / "report.html"
    assert run_cli("report", str(path), "--out", str(out)) == 0
    page = out.read_text()
    assert "pool_start 4.5, baselines 9.25" in page
    assert "seconds: compile 1.5, time 0.25" in page
    assert "max_seconds: max_seconds after 1 trial: it took 31.0 s of the 30 s budget" in page
    assert "31, 0.032" in page
