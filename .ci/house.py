"""Fails when the repository's layout grows back into its hall: more than MAX_ROOT_MODULES loose
modules at the package's root, a package directory with more than MAX_FLAT_FILES .py files side
by side, more than MAX_SCRIPTS files in scripts/, a BENCHMARKS.md over MAX_BENCHMARK_LINES lines
(history goes to docs/history/), or Python under docs/ that the ruff commands of .ci/run do not
lint. Prints one line per violation.

usage: python .ci/house.py [REPO_ROOT]   (default: the repository this file is in)
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

PACKAGE = "kernelpro_backend"
MAX_ROOT_MODULES = 8
MAX_FLAT_FILES = 30
MAX_SCRIPTS = 5
MAX_BENCHMARK_LINES = 500


def _linted_paths(root: Path) -> list[Path]:
    """The paths `ruff check` is given in .ci/run."""
    run = root / ".ci" / "run"
    found: list[Path] = []
    for line in run.read_text().splitlines() if run.exists() else []:
        words = shlex.split(line, comments=True)
        if words[:2] == ["ruff", "check"]:
            found += [root / w for w in words[2:] if not w.startswith("-")]
    return found


def violations(root: Path) -> list[str]:
    found = []
    package = root / PACKAGE
    loose = sorted(p.name for p in package.glob("*.py"))
    if len(loose) > MAX_ROOT_MODULES:
        found.append(
            f"{PACKAGE}/ holds {len(loose)} modules at its root (at most {MAX_ROOT_MODULES}): "
            "new code belongs in the package of its concept"
        )
    for folder in sorted(d for d in package.rglob("*") if d.is_dir() and d.name != "__pycache__"):
        flat = len(list(folder.glob("*.py")))
        if flat > MAX_FLAT_FILES:
            found.append(
                f"{folder.relative_to(root)}/ holds {flat} .py files flat (at most "
                f"{MAX_FLAT_FILES}): group them into sub-packages by concept"
            )
    scripts = [p for p in (root / "scripts").glob("*") if p.is_file()]
    if len(scripts) > MAX_SCRIPTS:
        found.append(
            f"scripts/ holds {len(scripts)} files (at most {MAX_SCRIPTS}): a probe goes beside its "
            "data in docs/gpu_runs/<date>-<name>/, a repeatable measurement into bench/"
        )
    bench = root / "BENCHMARKS.md"
    lines = bench.read_text().count("\n") if bench.exists() else 0
    if lines > MAX_BENCHMARK_LINES:
        found.append(
            f"BENCHMARKS.md has {lines} lines (at most {MAX_BENCHMARK_LINES}): keep the current "
            "tables with their commands; history goes to docs/history/"
        )
    linted = _linted_paths(root)
    for path in sorted((root / "docs").rglob("*.py")):
        if not any(path == p or p in path.parents for p in linted):
            found.append(
                f"{path.relative_to(root)}: Python under docs/ that .ci/run's ruff does not lint"
            )
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    found = violations(root)
    print("\n".join(found) if found else "house: ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
