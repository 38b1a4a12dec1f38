"""Two-stage feedback for one candidate, with fake stage-2 tools in the registry: only the tools
the class calls for and the plan allows run, ncu only below the best time, a failing tool is
recorded without losing the others' findings, and the roofline findings come first."""

from __future__ import annotations

import dataclasses
import pickle
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from kernelpro_backend.profilers import Bottleneck, Finding, Roofs, Severity, tools
from kernelpro_backend.profilers.ceilings import Ceilings
from kernelpro_backend.profilers.roofline import classify
from kernelpro_backend.profilers.speed_of_light import SpeedOfLight, Work
from kernelpro_backend.runtime import SourceCandidate
from kernelpro_backend.runtime import ncu_candidate as launcher
from kernelpro_backend.runtime.feedback import (
    FeedbackPlan,
    candidate_feedback,
    float_element_bytes,
    kernel_knobs,
    subgraph_roofs,
)

ALL = frozenset(Bottleneck)
# 100 MB against a 1 TB/s roof: 100 us of speed of light, far above the launch latency.
ROOFS = Roofs(bytes_per_s=1e12, flops_per_s=1e12)
WORK = Work(tensor_flops=0.0, other_flops=1e3, bytes=10**8, tensor_dtype="")
SLOW_MS = 1.0  # 10% of SOL: under-utilised
MEMORY_MS = 0.12  # 83% of SOL: on the memory roof
CANDIDATE = SourceCandidate("triton", "def entry(x):\n    return [x]\n", "entry")


@dataclasses.dataclass
class FakeTool:
    name: str
    applies_to: frozenset[Bottleneck] = ALL
    cost_s: float = 0.0
    severity: Severity = Severity.LOW
    raises: Exception | None = None
    missing: str | None = None
    targets: list = dataclasses.field(default_factory=list)

    def available(self):
        return self.missing

    def run(self, target):
        self.targets.append(target)
        if self.raises is not None:
            raise self.raises
        return [Finding(self.name, "metric", 1.0, None, self.severity, f"{self.name} says so")]


@pytest.fixture
def fake_tools(monkeypatch):
    """Replace the registry with fakes; returns a dict name -> FakeTool instance."""
    made: dict[str, FakeTool] = {}

    def install(*fakes: FakeTool) -> dict[str, FakeTool]:
        made.update({f.name: f for f in fakes})
        monkeypatch.setattr(tools, "_REGISTRY", {f.name: (lambda f=f: f) for f in fakes})
        return made

    return install


def feedback(plan, measured_ms=SLOW_MS, *, kernel=None, tmp_path, inputs=None):
    return candidate_feedback(
        plan,
        kernel=kernel or (lambda x: [x]),
        candidate=CANDIDATE,
        measured_ms=measured_ms,
        work=WORK,
        inputs=inputs if inputs is not None else (torch.ones(4),),
        knobs={"num_warps": 4},
        element_bytes=4,
        workdir=tmp_path,
    )


def test_only_tools_the_class_calls_for_and_the_plan_allows_run(fake_tools, tmp_path):
    made = fake_tools(
        FakeTool("memory_only", applies_to=frozenset({Bottleneck.MEMORY})),
        FakeTool("any_class"),
        FakeTool("not_allowed"),
    )
    plan = FeedbackPlan(ROOFS, tools=("memory_only", "any_class"))
    got = feedback(plan, tmp_path=tmp_path)
    assert got.bottleneck is Bottleneck.UNDERUTILIZED
    assert got.tools_run == ("any_class",)
    assert dict(got.tools_skipped) == {"memory_only": "not called for by the under-utilised class"}
    assert not made["not_allowed"].targets and not made["memory_only"].targets
    on_roof = feedback(plan, MEMORY_MS, tmp_path=tmp_path)
    assert on_roof.bottleneck is Bottleneck.MEMORY
    assert set(on_roof.tools_run) == {"memory_only", "any_class"} and not on_roof.tools_skipped


def test_roofline_findings_come_first_then_the_most_severe(fake_tools, tmp_path):
    fake_tools(FakeTool("info", severity=Severity.INFO), FakeTool("high", severity=Severity.HIGH))
    got = feedback(FeedbackPlan(ROOFS, tools=("info", "high")), tmp_path=tmp_path)
    assert [f.tool for f in got.findings] == ["roofline", "roofline", "high", "info"]
    expected = classify(SLOW_MS, WORK.flops, WORK.bytes, ROOFS, knobs={"num_warps": 4})
    assert got.findings[:2] == expected.findings


def test_a_raising_or_missing_tool_is_skipped_and_the_others_findings_kept(fake_tools, tmp_path):
    fake_tools(
        FakeTool("broken", raises=RuntimeError("cuobjdump crashed\nlong trace")),
        FakeTool("absent", missing="not installed here"),
        FakeTool("fine"),
    )
    got = feedback(FeedbackPlan(ROOFS, tools=("broken", "absent", "fine")), tmp_path=tmp_path)
    assert got.tools_run == ("fine",)
    assert [f.tool for f in got.findings if f.tool != "roofline"] == ["fine"]
    skipped = dict(got.tools_skipped)
    assert skipped == {"broken": "RuntimeError: cuobjdump crashed", "absent": "not installed here"}


def test_ncu_runs_only_below_the_best_time_and_rebuilds_the_candidate(fake_tools, tmp_path):
    made = fake_tools(FakeTool("ncu", cost_s=20.0), FakeTool("ptxas"))
    slower = feedback(FeedbackPlan(ROOFS, ("ncu",), ncu_below_ms=SLOW_MS), tmp_path=tmp_path)
    assert slower.tools_run == () and "not faster than the best so far" in dict(
        slower.tools_skipped
    ).get("ncu", "")
    assert not made["ncu"].targets
    for limit in (None, 2 * SLOW_MS):
        faster = feedback(FeedbackPlan(ROOFS, ("ncu",), ncu_below_ms=limit), tmp_path=tmp_path)
        assert faster.tools_run == ("ncu",), faster.tools_skipped
    target = made["ncu"].targets[-1]
    command = list(target.ncu_command)
    assert command[:3] == [sys.executable, "-m", "kernelpro_backend.runtime.ncu_candidate"]
    assert len(command) == 4 and target.kernel_name is None  # no names: first launch
    payload = pickle.loads(Path(command[3]).read_bytes())
    assert payload["candidate"] == CANDIDATE and payload["device"] == "cpu"
    assert torch.equal(payload["inputs"][0], torch.ones(4))


def test_the_budget_keeps_the_cheap_tools(fake_tools, tmp_path):
    fake_tools(FakeTool("free"), FakeTool("dear", cost_s=20.0), FakeTool("cheap", cost_s=1.0))
    plan = FeedbackPlan(ROOFS, ("free", "dear", "cheap"), budget_s=5.0)
    got = feedback(plan, tmp_path=tmp_path)
    assert got.tools_run == ("free", "cheap")
    assert dict(got.tools_skipped) == {"dear": "over the stage-2 budget of 5.0 s"}


def test_unknown_tool_in_the_plan_is_skipped_with_the_known_names(fake_tools, tmp_path):
    fake_tools(FakeTool("fine"))
    got = feedback(FeedbackPlan(ROOFS, ("fine", "vtune")), tmp_path=tmp_path)
    assert got.tools_run == ("fine",) and "known: fine" in dict(got.tools_skipped)["vtune"]


def test_ptxas_and_sass_say_why_they_have_nothing_to_read(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    got = feedback(FeedbackPlan(ROOFS, ("ptxas", "sass")), tmp_path=tmp_path)  # real tools
    assert got.tools_run == ()
    for name in ("ptxas", "sass"):
        assert "no compiled Triton kernels (interpreter" in dict(got.tools_skipped)[name]
    monkeypatch.delenv("TRITON_INTERPRET")
    got = feedback(FeedbackPlan(ROOFS, ("ptxas",)), tmp_path=tmp_path)
    assert "no compiled Triton kernels found" in dict(got.tools_skipped)["ptxas"]


def test_a_cuda_candidate_hands_its_cubin_to_sass_and_has_no_ptxas_report(fake_tools, tmp_path):
    made = fake_tools(FakeTool("ptxas"), FakeTool("sass"))

    class CudaLike:
        cubin = b"\x7fELF..."

        def __call__(self, x):
            return [x]

    got = feedback(FeedbackPlan(ROOFS, ("ptxas", "sass")), kernel=CudaLike(), tmp_path=tmp_path)
    assert got.tools_run == ("sass",) and made["sass"].targets[0].cubin == CudaLike.cubin
    assert "no ptxas report for a CUDA candidate" in dict(got.tools_skipped)["ptxas"]


def test_the_same_finding_from_two_compiled_variants_is_kept_once(fake_tools, tmp_path):
    class Twice(FakeTool):
        def run(self, target):
            return super().run(target) * 2

    fake_tools(Twice("twice"))
    got = feedback(FeedbackPlan(ROOFS, ("twice",)), tmp_path=tmp_path)
    assert [f.tool for f in got.findings] == ["roofline", "roofline", "twice"]


def test_subgraph_roofs_match_the_speed_of_light_time():
    ceilings = Ceilings("H100", 3.0e12, 60e12, 400e12, 800e12, 50 * 2**20)
    work = Work(tensor_flops=2e12, other_flops=1e10, bytes=10**9, tensor_dtype="bfloat16")
    roofs = subgraph_roofs(work, ceilings, "ieee")
    assert roofs.bytes_per_s == 3.0e12
    compute_ms = 1e3 * (2e12 / 800e12 + 1e10 / 60e12)
    assert 1e3 * work.flops / roofs.flops_per_s == pytest.approx(compute_ms)
    report = classify(10.0, work.flops, work.bytes, roofs)
    assert report.sol_ms == pytest.approx(SpeedOfLight.time_ms(work, ceilings, "ieee"))
    assert subgraph_roofs(work, ceilings, "ieee", sm_count=114).sm_count == 114
    no_flops = Work(0.0, 0.0, 10, "")
    assert subgraph_roofs(no_flops, ceilings, "ieee").flops_per_s == 60e12


def test_the_plan_is_plain_picklable_data():
    plan = FeedbackPlan(ROOFS, ("ptxas", "sass", "ncu"), ncu_below_ms=0.5, budget_s=30.0)
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_knobs_and_element_bytes_of_a_candidate():
    spec_like = type("K", (), {"spec": type("S", (), {"knobs": (("BLOCK", 64), ("num_warps", 4))})})
    assert kernel_knobs(spec_like()) == {"BLOCK": 64, "num_warps": 4}
    assert kernel_knobs(lambda x: x) == {}
    inputs = (torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.bfloat16))
    assert float_element_bytes(inputs) == 2 and float_element_bytes(()) == 4


def test_the_launcher_rebuilds_a_candidate_from_its_payload(monkeypatch, tmp_path):
    source = "import torch\ndef entry(x):\n    return [x * 2]\n"
    path = launcher.write_candidate_payload(
        SourceCandidate("triton", source, "entry"), [torch.arange(3.0)], tmp_path / "p.pkl"
    )
    seen = []
    monkeypatch.setattr(launcher, "profile_once", lambda fn, inputs: seen.append(fn(*inputs)))
    launcher.main([str(path)])
    assert torch.equal(seen[0][0], torch.tensor([0.0, 2.0, 4.0]))
    with pytest.raises(SystemExit, match="usage"):
        launcher.main(["--candidate"])


def _body(x_ptr):  # the Python function of a @triton.jit kernel; never compiled here
    pass


def launched_jit_function(compiled):
    """A JITFunction whose per-device cache holds `compiled`, as a launch on a GPU leaves it
    (filled by hand: no driver is touched)."""
    from triton.runtime.jit import JITFunction

    jitted = JITFunction(_body)
    jitted.device_caches[0] = ({"key": compiled}, {}, None, None, None)
    return jitted


def test_ptxas_reads_the_compiled_kernels_behind_a_spec_kernels_entry(tmp_path):
    compiled = types.SimpleNamespace(
        asm={"cubin": b""},
        name="kernel",
        n_regs=40,
        n_spills=0,
        metadata=types.SimpleNamespace(shared=0, num_warps=4),
    )
    namespace = {"kernel": launched_jit_function(compiled)}
    exec("def entry(x):\n    return [x]\n", namespace)  # a generated module's entry

    class SpecLike:  # codegen's SpecKernel: the entry function and the spec's knobs
        entry = staticmethod(namespace["entry"])
        spec = types.SimpleNamespace(knobs=(("num_warps", 4),))

    got = feedback(FeedbackPlan(ROOFS, ("ptxas",)), kernel=SpecLike(), tmp_path=tmp_path)
    assert got.tools_run == ("ptxas",), got.tools_skipped
    registers = [f for f in got.findings if f.metric == "registers_per_thread"]
    assert registers[0].value == 40 and "x 4 warps" in registers[0].guidance


def test_ncu_profiles_the_candidates_own_kernels_not_a_fill_before_them(
    fake_tools, monkeypatch, tmp_path
):
    import kernelpro_backend.runtime.feedback as module

    made = fake_tools(FakeTool("ncu"))
    triton_kernel = types.SimpleNamespace(name="kernel", metadata=None)
    monkeypatch.setattr(module, "triton_kernels_of", lambda fn: [triton_kernel])
    feedback(FeedbackPlan(ROOFS, ("ncu",)), tmp_path=tmp_path)
    regex = made["ncu"].targets[-1].kernel_name
    assert regex == "^(kernel)$"
    assert re.search(regex, "kernel") and not re.search(regex, "vectorized_elementwise_kernel")

    class CudaLike:  # runtime's CudaKernel: its launch header names the kernels
        spec = types.SimpleNamespace(kernels=("row_norm", "row_max"))
        cubin = b"\x7fELF"

    monkeypatch.setattr(module, "triton_kernels_of", lambda fn: [])
    feedback(FeedbackPlan(ROOFS, ("ncu",)), kernel=CudaLike(), tmp_path=tmp_path)
    assert made["ncu"].targets[-1].kernel_name == "^(row_max|row_norm)$"
