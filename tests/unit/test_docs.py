"""The documentation's checks that need no site build (tests/unit/test_site.py builds it).

- Every ``>>>`` example in the package's docstrings runs as a doctest: the modules are found by
  their source, so a new example is tested without being listed here (examples that cannot run
  outside AWS carry ``# doctest: +SKIP``).
- The version is one: ``aggregator.__version__``, pyproject.toml's and the newest released
  section of CHANGELOG.md.
"""

from __future__ import annotations

import doctest
import importlib
import re
import tomllib
from pathlib import Path

import pytest

import aggregator

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aggregator"


def _modules_with_examples() -> list[str]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(".".join(parts))
    return modules


MODULES = _modules_with_examples()


def test_examples_are_found() -> None:
    # the discovery itself works: modules known to hold runnable examples are among those found
    for known in ("aggregator.core.sortable", "aggregator.core.engine", "aggregator.core.text"):
        assert known in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} example(s) failed in {name}"


def test_one_version() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert aggregator.__version__ == pyproject["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released, "CHANGELOG.md has no released section (## [x.y.z] - YYYY-MM-DD)"
    assert released[0] == aggregator.__version__
