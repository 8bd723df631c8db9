"""The package's layering, checked by import-linter's contracts (``[tool.importlinter]`` in
pyproject.toml), and the absence of import cycles between modules (grimp, import-linter's graph).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint_imports, "import-linter is a dev dependency"
    result = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("aggregator", cache_dir=None)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if imported == module or graph.is_module_squashed(imported):
                continue
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain:
                cycles.append(" -> ".join((module, *chain)))
    # a package's __init__ re-exporting its own modules is not a cycle between modules
    cycles = [c for c in cycles if not _package_reexport(c)]
    assert cycles == []


def _package_reexport(chain: str) -> bool:
    first, *rest = chain.split(" -> ")
    return any(m.startswith(first + ".") or first.startswith(m + ".") for m in rest[:1])
