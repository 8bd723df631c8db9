"""``init`` and ``build``: a project of one's own, deployed with SAM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from aggregator.cli.options import rule_paths_option
from aggregator.cli.output import console

_NEXT_STEPS = """\
  1. write your rules in {rules}/ (aggregator validate {rules})
  2. aggregator template -d {rules}          # after every change of the rules
  3. sam build && sam deploy --guided       # ExistingTableName and ExistingTableStreamArn
                                            # attach it to a table of yours
"""


def _keys_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """``--keys PK/SK`` as ``("PK", "SK")``, ``--keys id`` as ``("id", None)``."""
    if value is None:
        return None
    from aggregator.cli.project.scaffold import parse_keys
    from aggregator.core.exceptions import ConfigError

    try:
        return parse_keys(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc).removeprefix(f"--keys {value!r}: ")) from None


@click.command("init", short_help="Write a deployable SAM project for the rules.")
@click.argument(
    "directory",
    default=Path("."),
    required=False,
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--keys",
    metavar="PARTITION[/SORT]",
    callback=_keys_option,
    help="Your table's key attribute names, e.g. PK/SK, or id alone for a table without a sort "
    "key: written as rules/table.yaml (default for a new project: pk/sk)",
)
@click.option("--force", is_flag=True, help="Replace files that exist with other content")
@click.option(
    "--show",
    type=click.Choice(
        [
            "template.yaml",
            "Makefile",
            "samconfig.toml",
            "rules/example.yaml",
            "rules/table.yaml",
            ".gitignore",
        ]
    ),
    help="Print one of the project files as shipped (nothing is written)",
)
def init_cmd(
    directory: Path, keys: tuple[str, str | None] | None, force: bool, show: str | None
) -> None:
    """Write a deployable project into DIRECTORY (default: here): template.yaml (SAM),
    Makefile (the build sam build runs), samconfig.toml, .gitignore (what the tools create;
    an existing one gets the lines it lacks appended), a starter rules/example.yaml when rules/
    has no rule file, and rules/table.yaml, the table's key names (--keys). The template is
    rendered for the rules. Files that exist with other content are left alone unless
    --force."""
    from aggregator.cli.project.scaffold import GITIGNORE, TABLE_RULES, init_project, project_file

    if show is not None:
        click.echo(project_file("gitignore" if show == GITIGNORE else show), nl=False)
        return
    result = init_project(directory, force=force, keys=keys)
    where = "" if directory == Path(".") else f" in {directory}"
    if result.written:
        console.print(f"wrote {', '.join(result.written)}{where}", highlight=False)
    if result.ignored:
        console.print(
            f"added to {GITIGNORE}: {', '.join(result.ignored)} (its other lines are kept)",
            highlight=False,
        )
    if result.unchanged:
        console.print(f"already as written: {', '.join(result.unchanged)}", highlight=False)
    for name in result.kept:
        console.print(
            f"left alone: {name} (there with other content; --force replaces it)",
            highlight=False,
        )
    if "Makefile" in result.kept:
        makefile = (directory / "Makefile").read_text(encoding="utf-8", errors="replace")
        if "build-AggregatorFunction:" not in makefile:
            console.print(
                "note: your Makefile needs the target sam build runs: add the lines of "
                "`aggregator init --show Makefile`",
                highlight=False,
            )
    if "template.yaml" in result.kept:
        console.print(
            "note: template.yaml is your own: `aggregator template -d rules` renders its "
            "regions (between '# aggregator:begin' and '# aggregator:end' lines)",
            highlight=False,
        )
    partition, sort = result.keys
    said = f"partition key {partition}, " + ("no sort key" if sort is None else f"sort key {sort}")
    origin = result.keys_in or "the default: no table: section"
    console.print(f"table keys: {said} ({origin})", highlight=False)
    if keys is not None and TABLE_RULES in result.kept:
        console.print(
            f"note: {TABLE_RULES} is your own: set its partition_key and sort_key to "
            f"{'/'.join(k for k in keys if k)} there (--force replaces the file)",
            highlight=False,
        )
    cd = "" if directory == Path(".") else f"  cd {directory}\n"
    console.print("next:\n" + cd + _NEXT_STEPS.format(rules=result.rules), highlight=False, end="")


@click.command("build", short_help="Build the Lambda function's artifact for sam build.")
@rule_paths_option("Rule file or directory to ship (repeat for several) [default: rules]")
@click.option(
    "--output",
    envvar="ARTIFACTS_DIR",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The artifact directory [env ARTIFACTS_DIR, as sam build sets it]",
)
@click.option(
    "--template",
    default=Path("template.yaml"),
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The SAM template: checked to be rendered for the rules; names the runtime",
)
@click.option(
    "--boto3",
    type=click.Choice(["bundle", "runtime"]),
    default="bundle",
    show_default=True,
    help="Ship boto3, or use the Lambda runtime's own copy",
)
@click.option(
    "--no-dependencies",
    is_flag=True,
    help="Ship the code and the rules only (no pip install)",
)
@click.option(
    "--no-bytecode",
    is_flag=True,
    help="Ship sources only (each cold start then compiles what it imports)",
)
def build_cmd(
    definitions: tuple[Path, ...],
    output: Path,
    template: Path,
    boto3: str,
    no_dependencies: bool,
    no_bytecode: bool,
) -> None:
    """Build the Lambda function's artifact (sam build runs this through the project's
    Makefile): the installed aggregator package without what the handler never imports (the
    CLI, the dev tools, the CDK construct, the operator jobs, the deploy tools), the rule files,
    and its dependencies for the template's runtime and architecture, after checking that the
    template is rendered for the rules. Bytecode ships too, compiled by a Python of the runtime's
    version (this one or python3.N on the PATH): Lambda cannot write it at a cold start."""
    from aggregator.cli.project.build import build_function, function_runtime

    built = build_function(
        list(definitions) or [Path("rules")],
        output,
        template=template,
        boto3=boto3,
        dependencies=not no_dependencies,
        bytecode=not no_bytecode,
    )
    console.print(
        f"{output}: {built.files:,} files, {built.size_bytes:,} bytes; rule files: "
        f"{' '.join(built.rule_files)}",
        highlight=False,
    )
    if built.bytecode_by is not None:
        console.print(f"bytecode: compiled by {built.bytecode_by}", highlight=False)
    elif not no_bytecode:
        version = function_runtime(template).python_version
        console.print(
            f"note: no bytecode shipped: no working Python {version} here (the function's "
            f"runtime) compiled it; each cold start compiles the modules it imports. Put a "
            f"python{version} that runs on the PATH and build again",
            highlight=False,
        )
