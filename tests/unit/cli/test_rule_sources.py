"""``-d``: repeatable on every command, ``./rules`` then ``./definitions`` without it, and a
missing default named with the ways to give rules."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from aggregator.cli import main
from aggregator.cli.options import RuleSources, layout_of

ROOT = Path(__file__).resolve().parents[3]


def _invoke(cwd: Path, *args: str, env: dict[str, str] | None = None):
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, list(args), env=env or {"AGGREGATOR_DEFINITIONS": None})
    finally:
        os.chdir(old)


def _write(path: Path, name: str, *, layout: str = "") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    file = path / f"{name}.yaml"
    file.write_text(f"version: 1\n{layout}rules:\n  - {{name: {name}, key: '{{k}}'}}\n")
    return file


def test_every_d_counts(tmp_path: Path) -> None:
    first = _write(tmp_path / "a", "first")
    second = _write(tmp_path / "b", "second", layout="table: {aggregates_pk: TOTALS}\n")
    result = _invoke(tmp_path, "filter-criteria", "-d", str(first), "-d", str(second))
    assert result.exit_code == 0, result.output
    filters = json.loads(result.output)["Filters"]
    assert "TOTALS" in filters[0]["Pattern"]  # the layout of the second file applies
    assert layout_of(RuleSources((first, second))).aggregates_pk == "TOTALS"


def test_the_environment_takes_several_paths_as_path_does(tmp_path: Path) -> None:
    first = _write(tmp_path, "first")
    second = _write(tmp_path / "more", "second", layout="table: {aggregates_pk: TOTALS}\n")
    result = _invoke(
        tmp_path, "filter-criteria", env={"AGGREGATOR_DEFINITIONS": f"{first}{os.pathsep}{second}"}
    )
    assert result.exit_code == 0, result.output
    assert "TOTALS" in json.loads(result.output)["Filters"][0]["Pattern"]


@pytest.mark.parametrize("directory", ["rules", "definitions"])
def test_without_d_rules_then_definitions(tmp_path: Path, directory: str) -> None:
    _write(tmp_path / directory, "mine", layout="table: {aggregates_pk: TOTALS}\n")
    if directory == "definitions":
        assert not (tmp_path / "rules").exists()
    result = _invoke(tmp_path, "filter-criteria")
    assert result.exit_code == 0, result.output
    assert "TOTALS" in json.loads(result.output)["Filters"][0]["Pattern"]


def test_rules_wins_over_definitions(tmp_path: Path) -> None:
    _write(tmp_path / "rules", "mine", layout="table: {aggregates_pk: TOTALS}\n")
    _write(tmp_path / "definitions", "demo")
    assert (
        "TOTALS" in json.loads(_invoke(tmp_path, "filter-criteria").output)["Filters"][0]["Pattern"]
    )


@pytest.mark.parametrize(
    "args",
    [
        ["filter-criteria"],
        ["template"],
        ["check-table", "--table", "orders"],
        ["query", "top", "r", "--table", "orders"],
    ],
)
def test_no_rules_anywhere_names_d_and_the_variable(tmp_path: Path, args: list[str]) -> None:
    result = _invoke(tmp_path, *args)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "error: no rules: give rule files or directories with -d (repeatable) or "
        "AGGREGATOR_DEFINITIONS; without them ./rules or ./definitions is read, and neither "
        "exists here (aggregator init writes a starter rules/)"
    ]


def test_template_names_every_source_in_its_fix(tmp_path: Path) -> None:
    first = _write(tmp_path / "a", "first")
    second = _write(tmp_path / "b", "second")
    (tmp_path / "template.yaml").write_text(
        (ROOT / "aggregator" / "cli" / "project" / "template.yaml").read_text()
    )
    result = _invoke(tmp_path, "template", "-d", str(first), "-d", str(second), "--check")
    assert result.exit_code == 1
    assert result.output.strip().endswith(
        f"run: aggregator template -d {first} -d {second} template.yaml"
    )
    rendered = _invoke(tmp_path, "template", "-d", str(first), "-d", str(second))
    assert rendered.output.strip() == f"template.yaml: rendered for the rules in {first}, {second}"


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    file = _write(rules, "mine", layout="table: {aggregates_pk: TOTALS}\n")
    result = _invoke(tmp_path, "filter-criteria", "-d", "rules", "-d", str(file), "-d", "rules")
    assert result.exit_code == 0, result.output
    assert "TOTALS" in json.loads(result.output)["Filters"][0]["Pattern"]


def test_validate_takes_d_and_the_default_directory(tmp_path: Path) -> None:
    _write(tmp_path / "rules", "mine")
    for args in (["validate"], ["validate", "-d", "rules"], ["validate", "rules", "-d", "rules"]):
        result = _invoke(tmp_path, *args)
        assert result.exit_code == 0, result.output
        assert "1 rule(s) valid" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = _invoke(empty, "validate")
    assert nothing.exit_code == 1 and nothing.output.startswith("error: no rules: give rule files")
