"""The tool registry and the ncu child for a plain callable."""

import torch

from kernelpro_backend.options import PROFILING_TOOLS
from kernelpro_backend.profilers import ncu_launcher
from kernelpro_backend.profilers.tools import registered


def test_options_name_exactly_the_built_in_tools():
    """`search_tools` is checked against options' list; the registry must hold the same names."""
    assert sorted(registered()) == sorted(PROFILING_TOOLS)


def _double(x):
    return x * 2


def test_the_launcher_runs_a_pickled_callable_between_the_markers(monkeypatch, tmp_path):
    path = ncu_launcher.write_payload(_double, [torch.arange(3.0)], tmp_path / "p.pkl")
    seen = []
    monkeypatch.setattr(ncu_launcher, "profile_once", lambda fn, xs: seen.append(fn(*xs)))
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self: self)  # no GPU here
    ncu_launcher.main([str(path)])
    assert torch.equal(seen[0], torch.tensor([0.0, 2.0, 4.0]))
