"""The row sweep's report on the CPU: runs merged (the last measurement of a case wins, an
error never replaces one), the [rows] checks (median of what ships against the roof, kernels
slower than a baseline), and one well-formed SVG chart per op, pass and dtype."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from kernelpro_backend.bench.row_report import bandwidths, charts, checks, merge, write_report

GB = 10**9


def case(cols: int, kernel: float | None, inductor: float = 1.0, eager: float = 3.0, **kw):
    r = {"op": "softmax", "pass": "forward", "dtype": "float32", "rows": 2**28 // cols}
    r |= {"cols": cols, "bytes": 2 * GB, "eager_ms": eager, "inductor_ms": inductor}
    timed = {"inductor": inductor, "eager": eager}
    if kernel is not None:
        r |= {"kernelpro_ms": kernel, "kernelpro_best": "cluster c8 w16 v4 pair split"}
        timed["kernel"] = kernel
    r["shipped"] = min(timed, key=lambda k: timed[k])
    r["shipped_ms"] = timed[r["shipped"]]
    return r | kw


def run(roof: float, *results: dict) -> dict:
    return {"meta": {"device": "H100", "copy_tb_s": roof}, "results": list(results)}


def test_the_last_measurement_of_a_case_wins_and_errors_never_replace_one():
    def skipped(cols: int) -> dict:
        where = {"op": "softmax", "pass": "forward", "dtype": "float32", "rows": 2**28 // cols}
        return where | {"cols": cols, "error": "skipped (budget)"}

    first = run(3.02, case(4096, 0.9), case(65536, 0.8))
    second = run(3.0, case(65536, 0.7))  # measured again: replaces the first
    third = run(3.1, skipped(4096), skipped(65536))  # errors: replace nothing
    doc = merge([first, second, third])
    assert {r["cols"]: r["kernelpro_ms"] for r in doc["results"]} == {4096: 0.9, 65536: 0.7}
    assert doc["meta"]["copy_tb_s"] == 3.0  # the lowest roof: a conservative target
    assert len(doc["meta"]["runs"]) == 3
    # an older run named a skipped case by op and size only; measured later, it is not missing
    older = {"op": "softmax", "rows": 2**28 // 4096, "cols": 4096, "error": "skipped (budget)"}
    assert merge([run(3.0, older), first])["results"] == first["results"]
    assert checks(merge([run(3.0, older)]))["missing"] == ["softmax   65536x4096: skipped (budget)"]
    only_errors = merge([run(3.0, skipped(1024))])
    assert checks(only_errors)["missing"] == [
        "softmax forward float32 262144x1024: skipped (budget)"
    ]


def test_checks_take_the_median_of_what_ships_and_name_every_lost_kernel():
    doc = merge(
        [
            run(
                2.5,
                case(1024, 0.8),  # 2.5 TB/s: the roof
                case(4096, None),  # no kernel: Inductor ships, 2.0 TB/s
                case(65536, 1.2),  # kernel slower than Inductor: Inductor ships
                case(262144, 0.9, max_autotune_ms=1.1),
                case(524288, 1.0, max_autotune_ms=0.8),  # max-autotune 1.25x faster
                case(16384, 1.0, max_autotune_ms=0.99),  # within timing noise
            )
        ]
    )
    found = checks(doc)
    assert found["behind_max_autotune"] == [
        "softmax forward float32 512x524288: max-autotune 0.800 ms, 1.25x faster than shipped 1.000"
    ]
    doc["results"] = doc["results"][:4]
    found = checks(doc)
    assert found["cases"] == 4 and found["max_autotune_timed"] == 1
    assert bandwidths(doc["results"][0])["shipped"] == pytest.approx(2.5)
    assert found["median_shipped_roof_fraction"] == pytest.approx((0.8 + 2 / 2.25) / 2 * 1.0)
    assert not found["meets_roof_target"]
    assert [line.split(":")[0] for line in found["kernel_lost"]] == [
        "softmax forward float32 65536x4096",
        "softmax forward float32 4096x65536",
    ]


def test_one_well_formed_chart_per_op_pass_and_dtype_with_the_roof():
    bf16 = case(65536, 0.4) | {"dtype": "bfloat16"}
    doc = merge([run(3.02, case(4096, 0.9), case(65536, 0.8, max_autotune_ms=0.95), bf16)])
    out = charts(doc)
    assert sorted(out) == ["softmax-forward-bfloat16", "softmax-forward-float32"]
    svg = ET.fromstring(out["softmax-forward-float32"])
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    for label in ("eager", "Inductor", "max-autotune", "kernelpro kernel", "shipped"):
        assert label in texts
    assert "copy roof 3.02" in texts and "4k" in texts and "64k" in texts
    # two row lengths: a line for each mode timed at both, a dot for max-autotune's one
    paths = list(svg.iter("{http://www.w3.org/2000/svg}path"))
    assert len(paths) == 4


def test_write_report_writes_the_merged_json_and_the_charts(tmp_path):
    found = write_report([run(3.02, case(65536, 0.7))], tmp_path)  # 2.86 TB/s: 95%
    saved = json.loads((tmp_path / "row_sweep_merged.json").read_text())
    assert saved["checks"] == found and found["meets_roof_target"]
    assert (tmp_path / "row-sweep-softmax-forward-float32.svg").exists()


def test_only_matches_the_start_of_a_word_of_a_case_name():
    from kernelpro_backend.bench.row_sweep import FULL_SIZES, selected

    name = "log_softmax fwd torch.bfloat16 4096x65536"
    assert not selected(name, ("softmax fwd",))  # the substring picked log_softmax before
    assert selected(name, ("log_softmax",)) and selected(name, ("softmax fwd", "bfloat16"))
    assert selected(name, ("4096x65536",)) and not selected(name, ("float16",))
    assert [c for _, c in FULL_SIZES] == [256, 1024, 4096, 16384, 65536, 262144, 524288]
    assert {r * c for r, c in FULL_SIZES} == {2**28}  # 1 GiB of float32 at every length


def test_the_ring_sweep_measures_the_default_alternative_and_its_one_knob_neighbours():
    """--clusters ring: the seed, the row-resident default and every spec one knob step from
    it (what a search measures first), a fraction of the whole cluster space; --clusters
    none: the seed alone."""
    import torch

    from kernelpro_backend.bench.row_sweep import SweepSpace, candidates, cluster_name
    from kernelpro_backend.codegen import alternatives
    from kernelpro_backend.explain import find_subgraphs
    from kernelpro_backend.lowering import lower

    x = torch.randn(2, 65536)
    (sg,) = [s for s in find_subgraphs(lambda x: x.softmax(-1), x) if s.kind != "gemm"]
    seed = lower(sg)
    (alt,) = [a for a in alternatives(seed) if a.template == "row_cluster"]
    ring = candidates(seed, SweepSpace(clusters="ring"))
    assert ring[0] == ("triton seed", seed) and ring[1] == (cluster_name(alt) + " (default)", alt)
    for _, spec in ring[2:]:
        moved = [k for k, v in spec.knobs if v != alt.knob(k)]
        assert len(moved) == 1, moved
    assert len({n for n, _ in ring}) == len(ring)
    everything = candidates(seed)
    assert 2 < len(ring) < len(everything) / 3
    named = candidates(seed, SweepSpace(seed_knobs=((("num_warps", 32),), (("ROWS", 3),))))
    assert [n for n, _ in named[:2]] == ["triton seed", "seed num_warps=32"]  # ROWS=3: illegal
    assert named[1][1].knob("num_warps") == 32 and len(named) == len(everything) + 1
    assert {dict(s.knobs)["HOLD"] for _, s in everything[1:]} >= {"registers", "shared", "split"}
    assert candidates(seed, SweepSpace(clusters="none")) == [("triton seed", seed)]
