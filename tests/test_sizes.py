"""The size check .ci/run applies to the package: it must flag what it claims to."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ci_sizes", ROOT / ".ci" / "sizes.py")
assert spec is not None and spec.loader is not None
sizes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sizes)


def test_flags_a_long_module_and_a_long_function(tmp_path):
    body = "\n".join(f"    x = {i}" for i in range(sizes.MAX_FUNCTION_LINES))
    (tmp_path / "long_fn.py").write_text(f"def f():\n{body}\n")
    (tmp_path / "long_module.py").write_text("x = 1\n" * (sizes.MAX_LINES + 1))
    (tmp_path / "fine.py").write_text("def g():\n    return 1\n")
    assert sizes.main([str(tmp_path)]) == 1
    flagged = [f for p in sorted(tmp_path.glob("*.py")) for f in sizes.oversized(p)]
    assert len(flagged) == 2
    assert "long_fn.py:1: f is 81 lines" in flagged[0]
    assert f"long_module.py: {sizes.MAX_LINES + 1} lines" in flagged[1]


def test_the_package_passes():
    assert sizes.main([str(ROOT / "kernelpro_backend"), str(ROOT / "scripts")]) == 0
