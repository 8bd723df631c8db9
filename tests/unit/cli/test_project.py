"""A project of one's own: ``aggregator init`` (package data rendered for the project's rules)
and ``aggregator build`` (the Lambda artifact ``sam build`` runs through the project's Makefile).

The wheel installed outside the repository, with the real ``sam build``, is
tests/package/test_own_project.py (``make test-package``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cfnlint.decode.cfn_yaml import loads as cfn_yaml_loads
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from aggregator.cli import main
from aggregator.cli.project import build as build_module
from aggregator.cli.project.build import (
    CLI_ONLY_DEPENDENCIES,
    FunctionRuntime,
    build_function,
    function_runtime,
    lambda_requirements,
)
from aggregator.cli.project.scaffold import PROJECT_FILES, init_project, parse_keys, project_file
from aggregator.cli.template import check_template_regions
from aggregator.core.exceptions import ConfigError, RuleError
from aggregator.core.rules import load_rules

ROOT = Path(__file__).resolve().parents[3]
PROJECT_DATA = ROOT / "aggregator" / "cli" / "project"
TEMPLATE_PATH = PROJECT_DATA / "template.yaml"

ORDERS_RULES = (
    "version: 1\n"
    "rules:\n"
    "  - name: orders_per_customer\n"
    "    match:\n"
    "      customer: {exists: true}\n"
    '    key: "{customer}"\n'
)


def _normalized_requirement(text: str) -> str:
    req = Requirement(text)
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    marker = f"; {req.marker}" if req.marker else ""
    # str(SpecifierSet) sorts its specifiers, so ">=2.6,<3" and "<3,>=2.6" compare equal.
    return f"{canonicalize_name(req.name)}{extras}{req.specifier}{marker}"


def _package_files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _invoke(*args: str, cwd: Path | None = None) -> Any:
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, list(args))
    old = Path.cwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, list(args))
    finally:
        os.chdir(old)


# --------------------------------------------------------------------------------------------
# aggregator init
# --------------------------------------------------------------------------------------------


def test_init_writes_a_project_rendered_for_its_starter_rules(tmp_path: Path) -> None:
    result = _invoke("init", str(tmp_path / "shop"))
    assert result.exit_code == 0, result.output
    project = tmp_path / "shop"
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()) == [
        ".gitignore",
        "Makefile",
        "rules/example.yaml",
        "rules/table.yaml",
        "samconfig.toml",
        "template.yaml",
    ]
    rules = load_rules(project / "rules")
    assert [r.name for r in rules] == ["orders_per_customer", "revenue_per_customer"]
    assert check_template_regions(project / "template.yaml", rules)
    assert (project / "Makefile").read_text() == project_file("Makefile")
    assert "build_in_source = true" in (project / "samconfig.toml").read_text()
    lines = result.output.splitlines()
    assert lines[0] == (
        "wrote template.yaml, Makefile, samconfig.toml, rules/example.yaml, rules/table.yaml, "
        f".gitignore in {project}"
    )
    assert lines[1] == "table keys: partition key pk, sort key sk (rules/table.yaml)"
    assert rules.layout.partition_key == "pk" and rules.layout.sort_key == "sk"
    assert "sam build && sam deploy --guided" in result.output


def test_init_twice_changes_nothing(tmp_path: Path) -> None:
    init_project(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    again = init_project(tmp_path)
    assert again.written == ()
    assert again.unchanged == (*PROJECT_FILES, ".gitignore")  # rules/ holds rules now
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_init_keeps_the_rules_that_are_there_and_renders_for_them(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "orders.yaml").write_text(
        "version: 1\ntable: {partition_key: PK, sort_key: SK}\n" + ORDERS_RULES.split("\n", 1)[1]
    )
    done = init_project(tmp_path)
    assert "rules/example.yaml" not in done.written
    assert not (tmp_path / "rules" / "example.yaml").exists()
    rules = load_rules(tmp_path / "rules")
    assert check_template_regions(tmp_path / "template.yaml", rules)
    template = cfn_yaml_loads((tmp_path / "template.yaml").read_text(), "template.yaml")
    keys = template["Resources"]["Table"]["Properties"]["KeySchema"]
    assert [k["AttributeName"] for k in keys] == ["PK", "SK"]


def test_init_never_overwrites_other_content_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("all:\n\techo mine\n")
    (tmp_path / "template.yaml").write_text("Resources: {}\n")
    result = _invoke("init", str(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:5] == [
        f"wrote samconfig.toml, rules/example.yaml, rules/table.yaml, .gitignore in {tmp_path}",
        "left alone: template.yaml (there with other content; --force replaces it)",
        "left alone: Makefile (there with other content; --force replaces it)",
        "note: your Makefile needs the target sam build runs: add the lines of `aggregator "
        "init --show Makefile`",
        "note: template.yaml is your own: `aggregator template -d rules` renders its regions "
        "(between '# aggregator:begin' and '# aggregator:end' lines)",
    ]
    assert lines[5:8] == [
        "table keys: partition key pk, sort key sk (rules/table.yaml)",
        "next:",
        f"  cd {tmp_path}",
    ]
    assert (tmp_path / "Makefile").read_text() == "all:\n\techo mine\n"
    assert (tmp_path / "template.yaml").read_text() == "Resources: {}\n"
    forced = _invoke("init", str(tmp_path), "--force")
    assert forced.exit_code == 0, forced.output
    assert (tmp_path / "Makefile").read_text() == project_file("Makefile")


def test_init_keys_writes_the_table_section_and_renders_the_template_for_it(
    tmp_path: Path,
) -> None:
    """``--keys PK/SK``: rules/table.yaml declares them, every rule file reads them, and the
    template's table, role and filters are rendered for them; ``--keys id``: no sort key."""
    project = tmp_path / "game"
    result = _invoke("init", str(project), "--keys", "PK/SK")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1] == (
        "table keys: partition key PK, sort key SK (rules/table.yaml)"
    )
    assert (
        (project / "rules" / "table.yaml")
        .read_text()
        .endswith("version: 1\ntable:\n  partition_key: PK\n  sort_key: SK\n")
    )
    rules = load_rules(project / "rules")
    assert (rules.layout.partition_key, rules.layout.sort_key) == ("PK", "SK")
    assert check_template_regions(project / "template.yaml", rules)
    template = cfn_yaml_loads((project / "template.yaml").read_text(), "template.yaml")
    keys = template["Resources"]["Table"]["Properties"]["KeySchema"]
    assert [(k["AttributeName"], k["KeyType"]) for k in keys] == [("PK", "HASH"), ("SK", "RANGE")]
    # the keys change: init's own table.yaml and template.yaml are rendered again, nothing else
    # (the user's rules stay)
    (project / "rules" / "example.yaml").write_text(ORDERS_RULES)
    result = _invoke("init", str(project), "--keys", "id")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:3] == [
        f"wrote template.yaml, rules/table.yaml in {project}",
        "already as written: Makefile, samconfig.toml, .gitignore",
        "table keys: partition key id, no sort key (rules/table.yaml)",
    ]
    assert (project / "rules" / "example.yaml").read_text() == ORDERS_RULES
    rules = load_rules(project / "rules")
    assert (rules.layout.partition_key, rules.layout.sort_key) == ("id", None)
    assert check_template_regions(project / "template.yaml", rules)
    template = cfn_yaml_loads((project / "template.yaml").read_text(), "template.yaml")
    keys = template["Resources"]["Table"]["Properties"]["KeySchema"]
    assert [k["AttributeName"] for k in keys] == ["id"]
    # init without --keys leaves the keys as they are
    again = init_project(project)
    assert again.written == () and again.keys == ("id", None)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ("PK/SK", ("PK", "SK")),
        ("id", ("id", None)),
        ("user id/sort.key", ("user id", "sort.key")),  # DynamoDB allows both
        ("null/true", ("null", "true")),  # written quoted: still text
        ("Pk\u00e9/S#k", ("Pk\u00e9", "S#k")),
    ],
)
def test_init_keys_accepts_names_dynamodb_accepts(
    tmp_path: Path, keys: str, expected: tuple[str, str | None]
) -> None:
    done = init_project(tmp_path, keys=parse_keys(keys))
    assert done.keys == expected
    layout = load_rules(tmp_path / "rules").layout
    assert (layout.partition_key, layout.sort_key) == expected


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            "PK/",
            "the sort key name is empty; for a table with only a partition key, write --keys PK",
        ),
        ("/SK", "the partition key name is empty"),
        ("PK/SK/X", "give PARTITION/SORT (e.g. PK/SK), or PARTITION alone"),
        ("PK/ SK", "the sort key name ' SK' has spaces at its ends"),
        ("P\tK", "holds a control character"),
        ("K" * 256, "is 256 bytes, over DynamoDB's 255-byte limit for key attribute names"),
        ("PK/PK", "partition_key and sort_key are both 'PK'"),
        ("value/SK", "partition_key 'value' is also the value_attribute the framework writes"),
        ("PK/ck#1", "names starting with 'c#' or 'ck#' are checkpoints"),
    ],
)
def test_init_keys_refuses_names_in_one_line(tmp_path: Path, keys: str, message: str) -> None:
    result = _invoke("init", str(tmp_path / "p"), "--keys", keys)
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert line.startswith("Error: Invalid value for '--keys': ") and message in line, line
    assert not (tmp_path / "p").exists()  # nothing written


def test_init_keys_agrees_with_a_table_section_of_ones_own(tmp_path: Path) -> None:
    """Rules of one's own that declare the table: the same keys write nothing more; other keys
    are refused, naming the file (one file of a rule set declares the layout)."""
    (tmp_path / "rules").mkdir()
    own = tmp_path / "rules" / "orders.yaml"
    own.write_text("table: {partition_key: PK, sort_key: SK}\n" + ORDERS_RULES)
    done = init_project(tmp_path, keys=("PK", "SK"))
    assert (done.keys, done.keys_in) == (("PK", "SK"), "rules/orders.yaml")
    assert not (tmp_path / "rules" / "table.yaml").exists()
    result = _invoke("init", str(tmp_path), "--keys", "pk/sk")
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {own}: its table: section declares the keys PK/SK, not pk/sk; change them "
        "there (one file of the rule set declares the table layout)"
    )


def test_init_keys_leaves_a_table_section_of_ones_own_alone_unless_forced(
    tmp_path: Path,
) -> None:
    (tmp_path / "rules").mkdir()
    mine = "table:\n  partition_key: PK\n  sort_key: SK\n  ttl_attribute: expiresAt\n"
    (tmp_path / "rules" / "table.yaml").write_text(mine)
    (tmp_path / "rules" / "orders.yaml").write_text(ORDERS_RULES)
    result = _invoke("init", str(tmp_path), "--keys", "id")
    assert result.exit_code == 0, result.output
    assert "left alone: rules/table.yaml (there with other content; --force replaces it)" in (
        result.output
    )
    assert "table keys: partition key PK, sort key SK (rules/table.yaml)" in result.output
    assert "note: rules/table.yaml is your own: set its partition_key and sort_key to id there" in (
        result.output
    )
    assert (tmp_path / "rules" / "table.yaml").read_text() == mine
    rules = load_rules(tmp_path / "rules")
    assert check_template_regions(tmp_path / "template.yaml", rules)


def test_init_appends_the_ignore_lines_a_gitignore_lacks(tmp_path: Path) -> None:
    """An existing .gitignore keeps every line; the missing ones are appended once (a line
    there as '/.venv', or negated as '!.cache/', counts as there)."""
    mine = "node_modules/\n/.venv\n!.cache/\n*.log"  # no newline at the end
    (tmp_path / ".gitignore").write_text(mine)
    result = _invoke("init", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "added to .gitignore: .aws-sam/, __pycache__/ (its other lines are kept)" in (
        result.output
    )
    assert (tmp_path / ".gitignore").read_text() == (
        mine
        + "\n# What the tools create (appended by `aggregator init`)\n.aws-sam/\n__pycache__/\n"
    )
    again = init_project(tmp_path)
    assert ".gitignore" in again.unchanged and again.ignored == ()
    fresh = tmp_path / "fresh"
    init_project(fresh)
    assert (fresh / ".gitignore").read_text() == project_file("gitignore")
    ignored = [line for line in project_file("gitignore").splitlines() if not line.startswith("#")]
    assert ignored == [".aws-sam/", ".cache/", ".venv/", "__pycache__/"]


def test_init_keeps_a_makefile_that_has_the_target(tmp_path: Path) -> None:
    (tmp_path / "Makefile").write_text("lint:\n\truff check\n\n" + project_file("Makefile"))
    result = _invoke("init", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "left alone: Makefile" in result.output
    assert "note: your Makefile needs" not in result.output
    assert (tmp_path / "template.yaml").exists()


def test_init_with_invalid_rules_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "bad.yaml").write_text("version: 1\nrules:\n  - {name: x}\n")
    with pytest.raises(RuleError, match=r"bad\.yaml: rule 'x'"):
        init_project(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rules"]


def test_init_shows_a_project_file() -> None:
    result = _invoke("init", "--show", "Makefile")
    assert result.exit_code == 0
    assert result.output == project_file("Makefile")
    assert "\nbuild-AggregatorFunction:" in result.output


def test_the_shipped_starter_rules_and_template_are_consistent() -> None:
    """The package's template is rendered for the repository's demo rules (test_template.py
    checks it in depth); the starter rules load, and init renders the template for them."""
    assert check_template_regions(TEMPLATE_PATH, load_rules(ROOT / "definitions"))
    assert load_rules(PROJECT_DATA / "rules" / "example.yaml")


def test_the_wheel_carries_the_project_files() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data = pyproject["tool"]["setuptools"]["package-data"]["aggregator.cli.project"]
    shipped = {p.relative_to(PROJECT_DATA).as_posix() for p in PROJECT_DATA.rglob("*")}
    for name in [*PROJECT_FILES, "gitignore", "rules/example.yaml", "rules/table.yaml"]:
        assert name in shipped
        assert any(Path(name).match(pattern) for pattern in data), name


# --------------------------------------------------------------------------------------------
# aggregator build
# --------------------------------------------------------------------------------------------


def test_the_project_makefile_builds_the_functions_by_their_logical_ids() -> None:
    """Each function (the stream's and the backfill's) has its target; both ship the one
    artifact, built for AggregatorFunction's runtime and architecture, which they share."""
    template = cfn_yaml_loads(TEMPLATE_PATH.read_text(encoding="utf-8"), str(TEMPLATE_PATH))
    functions = {
        n: r for n, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"
    }
    assert sorted(functions) == ["AggregatorFunction", "BackfillFunction"]
    for name, resource in functions.items():
        assert resource["Metadata"] == {"BuildMethod": "makefile"}
        assert f"\nbuild-{name}:" in project_file("Makefile")
        for key in ("CodeUri", "Runtime", "Architectures"):
            assert resource["Properties"][key] == functions["AggregatorFunction"]["Properties"][key]
    handlers = {n: r["Properties"]["Handler"] for n, r in functions.items()}
    assert handlers == {
        "AggregatorFunction": "aggregator.handler.handler",
        "BackfillFunction": "aggregator.backfill_handler.handler",
    }
    assert "\nbuild-BackfillFunction: build-AggregatorFunction\n" in project_file("Makefile")


def test_the_runtime_comes_from_the_template(tmp_path: Path) -> None:
    assert function_runtime(TEMPLATE_PATH) == FunctionRuntime("3.12", "manylinux2014_aarch64")
    x86 = tmp_path / "x86.yaml"
    x86.write_text(TEMPLATE_PATH.read_text().replace("        - arm64\n", "        - x86_64\n"))
    assert function_runtime(x86) == FunctionRuntime("3.12", "manylinux2014_x86_64")
    node = tmp_path / "node.yaml"
    node.write_text(TEMPLATE_PATH.read_text().replace("Runtime: python3.12", "Runtime: nodejs20.x"))
    with pytest.raises(ConfigError, match=r"Runtime is 'nodejs20\.x'"):
        function_runtime(node)


def test_lambda_requirements_are_the_runtime_dependencies_less_the_cli() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    expected = {
        _normalized_requirement(dep)
        for dep in pyproject["project"]["dependencies"]
        if canonicalize_name(Requirement(dep).name) not in CLI_ONLY_DEPENDENCIES
    }
    assert expected and {_normalized_requirement(r) for r in lambda_requirements()} == expected
    runtime = {_normalized_requirement(r) for r in lambda_requirements(boto3="runtime")}
    assert runtime == {r for r in expected if not r.startswith("boto3")}


def test_build_installs_dependencies_for_the_functions_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip installs for the runtime and architecture the template names (a wheel built for
    this machine would not load on arm64), pinned to what is installed here."""
    calls: list[list[str]] = []

    def fake_run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        constraints = Path(command[command.index("--constraint") + 1]).read_text()
        calls.append(constraints.splitlines())
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(build_module.subprocess, "run", fake_run)
    monkeypatch.setattr(build_module, "runtime_python", lambda version: None)  # pip's runs only
    out = tmp_path / "artifact"
    built = build_function([ROOT / "definitions"], out, template=TEMPLATE_PATH)
    command, constraints = calls
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    text = " ".join(command)
    assert "--platform manylinux2014_aarch64" in text
    assert "--python-version 3.12" in text
    assert "--implementation cp" in text and "--only-binary=:all:" in text
    assert f"--target {out}" in text
    assert command[-len(built.requirements) :] == list(built.requirements)
    import pydantic

    assert f"pydantic=={pydantic.VERSION}" in constraints
    assert not any(c.lower().startswith("ddb-aggregator==") for c in constraints)


def test_a_failing_pip_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(
            command, 1, "", "ERROR: Could not find a version that satisfies x\nERROR: No match\n"
        )

    monkeypatch.setattr(build_module.subprocess, "run", fake_run)
    monkeypatch.setattr(build_module, "runtime_python", lambda version: None)  # pip's runs only
    with pytest.raises(ConfigError) as info:
        build_function([ROOT / "definitions"], tmp_path / "a", template=TEMPLATE_PATH)
    assert str(info.value) == (
        "pip could not install the function's dependencies for manylinux2014_aarch64, Python "
        "3.12: ERROR: Could not find a version that satisfies x | ERROR: No match"
    )


def test_artifact_ships_the_runtime_package_and_the_chosen_rules_only(tmp_path: Path) -> None:
    artifact = tmp_path / "artifact"
    (artifact / "aggregator").mkdir(parents=True)
    (artifact / "aggregator" / "stale.py").write_text("")  # an earlier build's leftovers go
    # the runtime of this Python, so that the build compiles with this interpreter
    this = FunctionRuntime.of(f"python{sys.version_info.major}.{sys.version_info.minor}")
    built = build_function(
        [ROOT / "definitions"], artifact, template=TEMPLATE_PATH, runtime=this, dependencies=False
    )
    assert built.bytecode_by == sys.executable
    assert sorted(p.name for p in artifact.iterdir()) == ["aggregator", "definitions"]
    shipped = _package_files(artifact / "aggregator")
    source = _package_files(ROOT / "aggregator")
    # everything but the dev tools, the CLI, the CDK construct and the deploy-time tools (the
    # operator jobs ship for the backfill function)
    left_out = ("dev/", "cli/", "cdk/", "deploy/")
    assert shipped == {f for f in source if not f.startswith(left_out)}
    # and each module's bytecode, checked against its source's hash (PEP 552), so it stays
    # valid whatever modification times the zip gives the files
    modules = sorted((artifact / "aggregator").rglob("*.py"))
    assert len(modules) == sum(f.endswith(".py") for f in shipped)
    for module in modules:
        pyc = Path(importlib.util.cache_from_source(str(module))).read_bytes()
        assert pyc[:4] == importlib.util.MAGIC_NUMBER
        assert int.from_bytes(pyc[4:8], "little") == 0b11, module  # hash-based, checked
        assert pyc[8:16] == importlib.util.source_hash(module.read_bytes()), module
    assert sorted(p.name for p in (artifact / "definitions").iterdir()) == sorted(
        p.name for p in (ROOT / "definitions").iterdir() if p.suffix in (".yaml", ".yml")
    )

    # The handler's whole import closure loads from the artifact without the dev tools, the
    # CLI and their libraries, and finds the rules where the template's DefinitionsPath says.
    script = """
import importlib.abc, json, sys

BLOCKED = (
    "aggregator.dev", "aggregator.cli", "aggregator.cdk", "aggregator.operations",
    "aggregator.deploy", "click", "rich", "aws_cdk",
)

def blocked(name):
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if blocked(name):
            raise ImportError(f"the Lambda artifact must not import {name}")
        return None

sys.meta_path.insert(0, Block())
import aggregator.handler as handler
from aggregator.core.rules import load_rules

settings = handler.HandlerSettings.from_env()
rules = load_rules(settings.definitions)
print(json.dumps({
    "package": handler.__file__,
    "definitions": str(settings.definitions),
    "rules": len(rules),
    "blocked": sorted(m for m in sys.modules if blocked(m)),
}))
"""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGGREGATOR_")},
        "PYTHONPATH": str(artifact),
        "LAMBDA_TASK_ROOT": str(artifact),
        "AGGREGATOR_TABLE_NAME": "t",
        "AGGREGATOR_DEFINITIONS": "definitions",  # the template's DefinitionsPath default
    }
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout)
    assert Path(loaded["package"]).is_relative_to(artifact)
    assert Path(loaded["definitions"]) == artifact / "definitions"
    assert loaded["rules"] == len(load_rules(ROOT / "definitions"))
    assert loaded["blocked"] == []

    # the backfill function's closure too, with the operator jobs it runs and nothing else
    backfill = script.replace('"aggregator.operations",\n    ', "").replace(
        "import aggregator.handler as handler",
        "import aggregator.backfill_handler\nimport aggregator.handler as handler",
    )
    assert backfill != script
    run = subprocess.run(
        [sys.executable, "-c", backfill],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["blocked"] == []


def test_artifact_needs_rule_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such rule file or directory"):
        build_function([tmp_path / "no"], tmp_path / "a", template=TEMPLATE_PATH)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"no rule files \(\*.yaml, \*.yml\) in"):
        build_function([tmp_path / "empty"], tmp_path / "a", template=TEMPLATE_PATH)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "r.yaml").write_text(ORDERS_RULES)
    (tmp_path / "two" / "r.yaml").write_text(ORDERS_RULES)
    with pytest.raises(ConfigError, match=r"two rule files named r\.yaml"):
        build_function([tmp_path / "one", tmp_path / "two"], tmp_path / "a", template=None)
    assert not (tmp_path / "a").exists()


def test_build_checks_the_template_against_the_shipped_rules(tmp_path: Path) -> None:
    """Rules of one's own without derived rules: the template (rendered for the demo rules) no
    longer fits them, and the build says how to render it; nothing is built."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "orders.yaml").write_text(ORDERS_RULES)
    shutil.copyfile(TEMPLATE_PATH, tmp_path / "template.yaml")
    result = _invoke("build", "--output", "out", cwd=tmp_path)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "error: template.yaml: not rendered for the rules in rules; run: aggregator template "
        "-d rules template.yaml"
    ]
    assert not (tmp_path / "out").exists()
    assert _invoke("template", "-d", "rules", cwd=tmp_path).exit_code == 0
    built = _invoke("build", "--output", "out", "--no-dependencies", cwd=tmp_path)
    assert built.exit_code == 0, built.output
    first, second = built.output.splitlines()
    assert first.startswith("out: ") and first.endswith("rule files: orders.yaml")
    assert second.startswith(("bytecode: compiled by ", "note: no bytecode shipped: "))


def test_without_a_python_of_the_runtime_the_artifact_ships_sources_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_module, "runtime_python", lambda version: None)
    shutil.copyfile(TEMPLATE_PATH, tmp_path / "template.yaml")
    shutil.copytree(ROOT / "definitions", tmp_path / "rules")
    built = _invoke("build", "--output", "out", "--no-dependencies", cwd=tmp_path)
    assert built.exit_code == 0, built.output
    version = function_runtime(TEMPLATE_PATH).python_version
    assert built.output.splitlines()[1:] == [
        f"note: no bytecode shipped: no working Python {version} here (the function's runtime) "
        f"compiled it; each cold start compiles the modules it imports. Put a python{version} "
        "that runs on the PATH and build again"
    ]
    assert not list((tmp_path / "out").rglob("*.pyc"))
    no_bytecode = _invoke(
        "build", "--output", "out2", "--no-dependencies", "--no-bytecode", cwd=tmp_path
    )
    assert len(no_bytecode.output.splitlines()) == 1, no_bytecode.output


def test_the_runtime_python_is_this_one_or_a_working_one_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert build_module.runtime_python(this) == sys.executable
    other = "3.99"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert build_module.runtime_python(other) is None  # none on the PATH
    shim = tmp_path / f"python{other}"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.99: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    assert build_module.runtime_python(other) is None  # one that does not run
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    assert build_module.runtime_python(other) is None  # one of another version
    real = tmp_path / f"python{this}"
    real.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    real.chmod(0o755)
    monkeypatch.setattr(build_module.sys, "version_info", SimpleNamespace(major=3, minor=99))
    assert build_module.runtime_python(this) == str(real)


def test_the_project_makefile_runs_aggregator_build(tmp_path: Path) -> None:
    """``sam build`` runs ``make build-AggregatorFunction`` with ARTIFACTS_DIR; the recipe runs
    the aggregator CLI given (or on the PATH), and says what to do when there is none."""
    assert shutil.which("make"), "make is needed to check the project's build recipe"
    init_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL"}}
    cli = Path(sys.executable).parent / "aggregator"
    out = tmp_path / "artifact"
    ran = subprocess.run(
        [
            "make",
            "-s",
            "build-AggregatorFunction",
            f"ARTIFACTS_DIR={out}",
            f"AGGREGATOR={cli}",
            "BUILD_ARGS=--no-dependencies",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert sorted(p.name for p in (out / "definitions").iterdir()) == [
        "example.yaml",
        "table.yaml",
    ]
    missing = subprocess.run(
        ["make", "-s", "build-AggregatorFunction", f"ARTIFACTS_DIR={out}", "AGGREGATOR=nope"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode != 0
    assert "'nope' not found: activate the virtualenv where ddb-aggregator is installed" in (
        missing.stderr
    )


def test_boto3_runtime_ships_no_aws_sdk_even_one_a_dependency_brings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        target = Path(command[command.index("--target") + 1])
        assert not any(
            c.startswith("boto3") for c in command[command.index("--only-binary=:all:") :]
        )
        for name in ("botocore", "botocore-1.44.8.dist-info", "s3transfer", "pydantic"):
            (target / name).mkdir(parents=True)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(build_module.subprocess, "run", fake_run)
    monkeypatch.setattr(build_module, "runtime_python", lambda version: None)  # pip's runs only
    out = tmp_path / "artifact"
    build_function([ROOT / "definitions"], out, template=TEMPLATE_PATH, boto3="runtime")
    assert sorted(p.name for p in out.iterdir()) == ["aggregator", "definitions", "pydantic"]


def test_an_output_holding_the_builds_sources_is_refused_and_nothing_lost(tmp_path: Path) -> None:
    """``--output .`` in the project with ``-d definitions`` would replace the user's rule
    files with their own copies (deleting them first)."""
    shutil.copytree(ROOT / "definitions", tmp_path / "definitions")
    before = sorted(p.name for p in (tmp_path / "definitions").iterdir())
    shutil.copyfile(TEMPLATE_PATH, tmp_path / "template.yaml")
    result = _invoke(
        "build", "-d", "definitions", "--output", ".", "--no-dependencies", cwd=tmp_path
    )
    assert result.exit_code == 1
    (line,) = result.output.splitlines()
    assert line.startswith("error: .: the artifact directory holds definitions/")
    assert sorted(p.name for p in (tmp_path / "definitions").iterdir()) == before
    assert not (tmp_path / "aggregator").exists()


def test_an_output_under_a_file_is_one_line(tmp_path: Path) -> None:
    shutil.copyfile(TEMPLATE_PATH, tmp_path / "template.yaml")
    shutil.copytree(ROOT / "definitions", tmp_path / "rules")
    (tmp_path / "afile").write_text("")
    result = _invoke("build", "--output", "afile/sub", "--no-dependencies", cwd=tmp_path)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "error: afile/sub: cannot create the artifact directory: Not a directory"
    ]


def test_a_failed_compile_ships_no_bytecode_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = tmp_path / "python-failing"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setattr(build_module, "runtime_python", lambda version: str(failing))
    built = build_function(
        [ROOT / "definitions"], tmp_path / "a", template=TEMPLATE_PATH, dependencies=False
    )
    assert built.bytecode_by is None
    assert not list((tmp_path / "a").rglob("*.pyc"))


def test_bytecode_is_the_same_wherever_it_is_built_and_goes_with_no_bytecode(
    tmp_path: Path,
) -> None:
    this = FunctionRuntime.of(f"python{sys.version_info.major}.{sys.version_info.minor}")
    for name in ("a", "deeper/b"):
        build_function(
            [ROOT / "definitions"], tmp_path / name, template=None, runtime=this, dependencies=False
        )
    module = Path("aggregator/core/engine.py")
    first, second = (
        Path(importlib.util.cache_from_source(str(tmp_path / name / module))).read_bytes()
        for name in ("a", "deeper/b")
    )
    assert first == second
    assert b"/var/task/aggregator/core/engine.py" in first  # the source path in Lambda
    build_function(
        [ROOT / "definitions"],
        tmp_path / "a",
        template=None,
        runtime=this,
        dependencies=False,
        bytecode=False,
    )
    assert not list((tmp_path / "a").rglob("__pycache__"))


def test_a_runtime_that_is_not_literal_is_named_as_such(tmp_path: Path) -> None:
    template = tmp_path / "template.yaml"
    text = TEMPLATE_PATH.read_text()
    assert "      Runtime: python3.12\n" in text
    template.write_text(text.replace("      Runtime: python3.12\n", "      Runtime: !Ref Py\n"))
    with pytest.raises(ConfigError, match=r"has no literal Runtime .* set Runtime: python3\.N"):
        function_runtime(template)


def test_an_output_holding_the_installed_package_is_refused(tmp_path: Path) -> None:
    """In an editable checkout the installed package is the checkout's own ``aggregator/``: an
    output that holds it would have the build replace it with its copy."""
    import aggregator

    checkout = Path(aggregator.__file__).resolve().parents[1]
    this = FunctionRuntime.of(f"python{sys.version_info.major}.{sys.version_info.minor}")
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "definitions", rules)  # outside the checkout: only the package is
    with pytest.raises(ConfigError, match=r"the artifact directory holds \S*/aggregator, which"):
        build_function([rules], checkout, template=None, runtime=this, dependencies=False)
    assert (checkout / "aggregator" / "__init__.py").exists()
