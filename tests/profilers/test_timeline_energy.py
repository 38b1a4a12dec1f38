import json

from profilers_fixtures import read_fixture

from kernelpro_backend.profilers import Severity
from kernelpro_backend.profilers.energy import EnergyReading, energy_findings
from kernelpro_backend.profilers.timeline import KernelEvent, kernel_events, timeline_findings


def test_eager_chain_has_three_launches_per_call_and_launch_gaps():
    events = kernel_events(json.loads(read_fixture("timeline_eager_chain.json")))
    assert len(events) == 15 and all(e.duration_us > 0 for e in events)
    by_metric = {f.metric: f for f in timeline_findings(events, calls=5)}
    launches = by_metric["kernel_launches_per_call"]
    assert launches.value == 3 and launches.severity is Severity.MEDIUM
    assert "fused kernel" in launches.guidance
    assert by_metric["launch_gap_us"].value > 5


def test_one_back_to_back_kernel_per_call_gets_only_info():
    events = [KernelEvent("k", 100.0 * i, 99.0) for i in range(5)]
    findings = timeline_findings(events, calls=5)
    assert [f.severity for f in findings] == [Severity.INFO]


def test_energy_finding_reports_millijoules_and_watts():
    (finding,) = energy_findings(
        EnergyReading(joules_per_call=0.021, seconds_per_call=7e-5, calls=8000)
    )
    assert finding.metric == "joules_per_call" and finding.value == 0.021
    assert "21.000 mJ" in finding.guidance and "300 W" in finding.guidance
