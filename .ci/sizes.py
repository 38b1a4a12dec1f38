"""Fails when a module of the package or scripts/ is over MAX_LINES lines or a function over
MAX_FUNCTION_LINES: a long module holds more than one job, a long function more than one step.

usage: python .ci/sizes.py [DIR ...]   (default: kernelpro_backend scripts)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_LINES = 400
MAX_FUNCTION_LINES = 80


def oversized(path: Path) -> list[str]:
    source = path.read_text()
    found = []
    lines = source.count("\n")
    if lines > MAX_LINES:
        found.append(f"{path}: {lines} lines (at most {MAX_LINES})")
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(
                    f"{path}:{node.lineno}: {node.name} is {length} lines "
                    f"(at most {MAX_FUNCTION_LINES})"
                )
    return found


def main(dirs: list[str]) -> int:
    found = [f for d in dirs for p in sorted(Path(d).rglob("*.py")) for f in oversized(p)]
    print("\n".join(found) if found else f"sizes: ok ({', '.join(dirs)})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["kernelpro_backend", "scripts"]))
