"""The package's layering, checked by import-linter's contracts (``[tool.importlinter]`` in
pyproject.toml), and the absence of import cycles between modules (grimp, import-linter's graph).
"""

from __future__ import annotations

import ast
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


def _private_imports(path: Path) -> list[str]:
    """Where ``path`` imports a private name (``_x``) of another aggregator module, or reads one
    through a module it imported (``module._x``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: set[str] = set()  # names bound to aggregator modules
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aggregator"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno} {node.module}.{alias.name}")
                else:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name.startswith("aggregator")}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    return sorted(found)


def test_no_private_name_crosses_modules():
    found = [
        hit
        for path in sorted((ROOT / "aggregator").rglob("*.py"))
        for hit in _private_imports(path)
    ]
    assert found == []


def test_the_private_name_check_sees_both_forms(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from aggregator.core import engine\n"
        "from aggregator.runtime.processor import _merge, create_processor\n"
        "engine._helper()\n"
        "create_processor._x\n"
    )
    assert _private_imports(sample) == [
        "sample.py:2 aggregator.runtime.processor._merge",
        "sample.py:3 engine._helper",
        "sample.py:4 create_processor._x",
    ]
