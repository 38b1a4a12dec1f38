"""The GEMM sweep's summary: what a user gets after the search is the kept kernel re-timed by
the sweep's own timer against the sweep's Inductor (or, in older runs, both in the search's
pool), or the fallback at 1.00x — never a candidate that was measured faster but not kept, and
never a search's figure set against the sweep's baselines."""

from __future__ import annotations

import pytest

from kernelpro_backend.bench.gemm_table import merge, summary, table


def _case(kept: bool, **search) -> dict:
    return {
        "case": "bf16 mm 64^3", "cublas_ms": 1.0, "eager_ms": 1.0, "inductor_ms": 1.1,
        "configs": [{"kind": "default", "status": "ok", "ms": 1.2, "config": "seed"}],
        "search": {"best_candidate_ms": 0.9, "trials": 5, "kept_kernel": kept,
                   "inductor_ms": 1.08, **search},
    }  # fmt: skip


def test_a_kept_kernel_without_a_sweep_timing_is_reported_against_inductor_in_its_own_pool():
    s = summary(_case(True, winner_ms=0.9))
    assert s["kept"] and s["after_x_inductor"] == round(1.08 / 0.9, 3)
    assert s["after_timer"] == "search"
    assert "1.20x (kept in search)" in table(_meta(), [_case(True, winner_ms=0.9)])


def test_a_kept_kernel_retimed_by_the_sweep_stands_against_the_sweeps_inductor():
    case = _case(True, winner_ms=0.9, kept_ms=1.0)
    s = summary(case)
    assert s["after_x_inductor"] == round(1.1 / 1.0, 3) and s["after_timer"] == "sweep"
    assert s["x_inductor"] == round(1.1 / 1.0, 3)  # ours: the kept kernel, not the search's 0.9
    assert "1.10x (kept)" in table(_meta(), [case])


def test_the_searchs_own_figures_never_meet_the_sweeps_baselines():
    s = summary(_case(False))
    assert s["ours_ms"] == 1.2  # the seed: the search's 0.9 was timed in another pool
    assert s["x_inductor"] == round(1.1 / 1.2, 3)
    assert s["search_x_inductor"] == round(1.08 / 0.9, 3)  # beside its own baseline


def test_a_kept_kernel_that_fails_its_recheck_is_shown_not_counted():
    case = _case(True, winner_ms=0.9, kept_error="wrong: output 0 differs")
    s = summary(case)
    assert s["after_x_inductor"] == 1.0 and "kept_ms" not in s
    assert "kept kernel wrong" in table(_meta(), [case])


def test_a_faster_candidate_that_was_not_kept_leaves_the_fallback():
    s = summary(_case(False))
    assert not s["kept"] and s["after_x_inductor"] == 1.0
    assert s["search_ms"] == 0.9  # still shown as the search's best, beside it
    assert "1.00x (fallback)" in table(_meta(), [_case(False)])


def test_a_case_without_a_search_has_no_after_search_figure():
    case = _case(False)
    del case["search"]
    assert "kept" not in summary(case)


def _meta() -> dict:
    return {"device": "cpu", "torch": "x", "triton": "y", "date": "today"}


def _run(date: str, *cases: dict, device: str = "H100") -> dict:
    meta = {"device": device, "torch": "2.11", "triton": "3.6", "date": date}
    return {"meta": meta, "results": list(cases)}


def test_runs_merge_into_one_table_a_measured_case_replacing_a_skipped_one():
    a = _case(True, winner_ms=0.9)
    skipped = {"case": "fp16 mm 64^3", "group": "square", "error": "skipped (time budget)"}
    b = dict(_case(False), case="fp16 mm 64^3")
    merged = merge([_run("d1", a, skipped), _run("d2", b)])
    assert [c["case"] for c in merged["results"]] == ["bf16 mm 64^3", "fp16 mm 64^3"]
    assert "error" not in merged["results"][1] and merged["meta"]["date"] == "d1 / d2"
    assert len(merged["meta"]["runs"]) == 2
    assert "fp16 mm 64^3" in table(merged["meta"], merged["results"])


def test_runs_of_different_devices_do_not_merge():
    with pytest.raises(ValueError, match="device"):
        merge([_run("d1", _case(False)), _run("d2", _case(False), device="H200")])
