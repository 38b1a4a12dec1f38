"""The layout check .ci/run applies to the repository (.ci/house.py): on a fake tree it flags each
rule it claims to, once, and nothing in a tidy tree."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ci_house", ROOT / ".ci" / "house.py")
assert spec is not None and spec.loader is not None
house = importlib.util.module_from_spec(spec)
spec.loader.exec_module(house)


def _tree(root: Path, root_modules: int, flat: int, scripts: int, bench_lines: int) -> None:
    package = root / house.PACKAGE
    (package / "codegen").mkdir(parents=True)
    for i in range(root_modules):
        (package / f"m{i}.py").write_text("")
    for i in range(flat):
        (package / "codegen" / f"t{i}.py").write_text("")
    (root / "scripts").mkdir()
    for i in range(scripts):
        (root / "scripts" / f"s{i}.py").write_text("")
    (root / "BENCHMARKS.md").write_text("row\n" * bench_lines)
    (root / "docs" / "gpu_runs" / "2026-11-26-probe").mkdir(parents=True)
    (root / "docs" / "gpu_runs" / "2026-11-26-probe" / "probe.py").write_text("")
    (root / ".ci").mkdir()
    (root / ".ci" / "run").write_text("ruff check kernelpro_backend tests docs/gpu_runs\n")


def test_each_rule_flags_its_violation_once(tmp_path: Path) -> None:
    _tree(
        tmp_path, house.MAX_ROOT_MODULES + 1, house.MAX_FLAT_FILES + 1, house.MAX_SCRIPTS + 1,
        house.MAX_BENCHMARK_LINES + 1,
    )  # fmt: skip
    (tmp_path / "docs" / "history").mkdir()
    (tmp_path / "docs" / "history" / "old.py").write_text("")  # outside what ruff is given
    found = house.violations(tmp_path)
    assert len(found) == 5, found
    assert found[0].startswith(f"{house.PACKAGE}/ holds {house.MAX_ROOT_MODULES + 1} modules")
    assert found[1].startswith(f"{house.PACKAGE}/codegen/ holds {house.MAX_FLAT_FILES + 1} .py")
    assert found[2].startswith(f"scripts/ holds {house.MAX_SCRIPTS + 1} files")
    assert found[3].startswith(f"BENCHMARKS.md has {house.MAX_BENCHMARK_LINES + 1} lines")
    assert found[4].startswith("docs/history/old.py: Python under docs/")
    assert house.main([str(tmp_path)]) == 1


def test_a_tidy_tree_passes(tmp_path: Path) -> None:
    _tree(
        tmp_path, house.MAX_ROOT_MODULES, house.MAX_FLAT_FILES, house.MAX_SCRIPTS,
        house.MAX_BENCHMARK_LINES,
    )  # fmt: skip
    assert house.violations(tmp_path) == []
