"""Nothing below cli/ imports cli/ or argparse: the library works without the command line.

torch itself imports argparse (torch 2.13: `import torch` puts it in sys.modules), so whether
argparse is loaded says nothing about kernelpro; the source is checked for it instead."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import kernelpro_backend

PACKAGE = Path(kernelpro_backend.__file__).parent
LIBRARY = ("cache", "profilers", "runtime", "bench", "search")


def test_importing_the_library_loads_no_cli_module():
    """Each library package and every module in it, imported in a fresh interpreter."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        f"for name in {LIBRARY!r}:\n"
        "    package = importlib.import_module('kernelpro_backend.' + name)\n"
        "    for found in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(found.name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kernelpro_backend'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.splitlines()[-1])
    assert {"kernelpro_backend.bench.runner", "kernelpro_backend.cache.maintenance"} <= set(loaded)
    assert [m for m in loaded if m.startswith("kernelpro_backend.cli")] == []


def _imports(path: Path) -> set[str]:
    """Modules a source file imports, relative ones resolved against its package."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def test_no_module_outside_cli_imports_cli_or_argparse():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "cli":
            continue
        bad = {
            m for m in _imports(path)
            if m == "argparse" or m.startswith(("kernelpro_backend.cli.", "argparse."))
            or m == "kernelpro_backend.cli"
        }  # fmt: skip
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert offenders == {}
