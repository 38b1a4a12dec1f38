"""`kernelpro report LOG`: the HTML never lands on the log it was rendered from."""

from __future__ import annotations

import json
import os

from .conftest import run_cli

EVENTS = [
    {"event": "start", "subgraph": "ab12cd", "pattern": "softmax", "kind": "reduction",
     "sol_ms": 0.011, "baselines": {"eager": 0.05, "inductor": 0.03}, "budget": {}, "time": "t"},
    {"event": "trial", "id": 0, "parent": None, "move": "lower", "status": "ok",
     "candidate": {"template": "row_softmax", "knobs": []}, "median_ms": 0.02, "speedup": 1.5,
     "sol_fraction": 0.5, "reward": 1.5, "findings": []},
    {"event": "end", "winner": 0, "best_ms": 0.02, "speedup_vs_inductor": 1.5, "trials": 1,
     "reason": "budget"},
]  # fmt: skip
LOG = "\n".join(json.dumps(e) for e in EVENTS) + "\n"


def test_a_log_named_html_gets_its_report_beside_it(tmp_path):
    log = tmp_path / "search.html"  # a log saved under an .html name
    log.write_text(LOG)
    assert run_cli("report", str(log)) == 0
    assert log.read_text() == LOG  # the input is untouched
    assert "<html" in (tmp_path / "search.report.html").read_text().lower()


def test_out_naming_the_log_itself_is_refused_in_one_line(tmp_path, capsys):
    log = tmp_path / "search.jsonl"
    log.write_text(LOG)
    (tmp_path / "link.html").symlink_to(log)
    os.link(log, tmp_path / "hard.html")
    for out in (log, tmp_path / "link.html", tmp_path / "hard.html", tmp_path / "." / log.name):
        assert run_cli("report", str(log), "--out", str(out)) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is the search log itself" in err
        assert log.read_text() == LOG
    assert run_cli("report", str(log)) == 0  # the default: search.html beside it
    assert log.read_text() == LOG and (tmp_path / "search.html").is_file()
