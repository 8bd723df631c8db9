"""The package as a user gets it, in a project of their own (``make test-package``).

The wheel built from this checkout (``AGGREGATOR_WHEEL``) is installed into a fresh virtualenv
in a directory outside the clone, with the locked versions of its dependencies
(``AGGREGATOR_CONSTRAINTS``); there ``aggregator init`` writes the project, a rule file of the
user's replaces the starter, ``aggregator template`` renders the template for it, cfn-lint checks
the template, and the SAM CLI (``AGGREGATOR_SAM``, from PyPI, locked in requirements/sam.txt)
builds the function through the project's Makefile. Nothing of the repository is on the path.

tests/conftest.py leaves this directory out unless ``AGGREGATOR_WHEEL`` is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cfnlint.decode.cfn_yaml import loads as cfn_yaml_loads

ROOT = Path(__file__).resolve().parents[2]
WHEEL = Path(os.environ.get("AGGREGATOR_WHEEL", "")).resolve()
SAM = os.environ.get("AGGREGATOR_SAM", "sam")
CONSTRAINTS = os.environ.get("AGGREGATOR_CONSTRAINTS")

RULES = """\
version: 1
rules:
  - name: likes_per_post
    match:
      kind: like
      post: {exists: true}
    key: "{post}"
    leaderboard: true
"""


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A fresh virtualenv outside the clone with the wheel installed; the environment a user
    has after activating it."""
    assert WHEEL.is_file(), f"AGGREGATOR_WHEEL={WHEEL} is not a built wheel"
    home = tmp_path_factory.mktemp("user")
    assert not home.is_relative_to(ROOT)
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL"}
        and not k.startswith("AGGREGATOR_")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["SAM_CLI_TELEMETRY"] = "0"
    install = [str(venv / "bin" / "pip"), "install", "--quiet", str(WHEEL)]
    if CONSTRAINTS:
        install += ["--constraint", CONSTRAINTS]
    _run(install, cwd=home, env=env)
    return env


def test_the_wheel_holds_the_package_and_its_project_files_only() -> None:
    names = zipfile.ZipFile(WHEEL).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"aggregator"}
    shipped = ("template.yaml", "Makefile", "samconfig.toml", "gitignore")
    for name in (*shipped, "rules/example.yaml", "rules/table.yaml"):
        assert f"aggregator/cli/project/{name}" in names


def test_init_template_lint_and_sam_build_in_a_project_of_ones_own(
    user_env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "likes"
    # the aggregator of the user's virtualenv, imported from there
    where = _run(
        ["python", "-c", "import aggregator; print(aggregator.__file__)"], tmp_path, user_env
    )
    assert not Path(where.strip()).is_relative_to(ROOT)

    out = _run(["aggregator", "init", str(project), "--keys", "PK/SK"], tmp_path, user_env)
    assert out.startswith(
        "wrote template.yaml, Makefile, samconfig.toml, rules/example.yaml, rules/table.yaml, "
        ".gitignore"
    )
    assert "table keys: partition key PK, sort key SK (rules/table.yaml)" in out
    (project / "rules" / "example.yaml").unlink()
    (project / "rules" / "likes.yaml").write_text(RULES, encoding="utf-8")
    out = _run(["aggregator", "template", "-d", "rules"], project, user_env)
    assert out.strip() == "template.yaml: rendered for the rules in rules"
    _run(["aggregator", "template", "-d", "rules", "--check"], project, user_env)

    template = cfn_yaml_loads((project / "template.yaml").read_text(), "template.yaml")
    keys = template["Resources"]["Table"]["Properties"]["KeySchema"]
    assert [k["AttributeName"] for k in keys] == ["PK", "SK"]
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    _run([str(cfn_lint), "--include-checks", "I", "--", "template.yaml"], project, user_env)

    _run([SAM, "build"], project, user_env, timeout=900)
    built = project / ".aws-sam" / "build"
    function = built / "AggregatorFunction"
    assert (built / "template.yaml").is_file()
    assert (function / "aggregator" / "handler.py").is_file()
    assert not (function / "aggregator" / "cli").exists()
    assert not (function / "aggregator" / "dev").exists()
    assert not (function / "aggregator" / "cdk").exists()
    assert sorted(p.name for p in (function / "definitions").iterdir()) == [
        "likes.yaml",
        "table.yaml",
    ]
    # dependencies for the template's runtime (python3.12, arm64), the CLI's left out
    (core,) = list((function / "pydantic_core").glob("_pydantic_core.*.so"))
    assert core.name == "_pydantic_core.cpython-312-aarch64-linux-gnu.so"
    assert (function / "boto3").is_dir() and (function / "aws_lambda_powertools").is_dir()
    assert not (function / "click").exists() and not (function / "rich").exists()
