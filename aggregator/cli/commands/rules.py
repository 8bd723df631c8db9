"""``validate`` and ``filter-criteria``: commands over rule files, no table needed."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from aggregator.cli.options import RuleSources, _definitions_option
from aggregator.cli.output import console, err_console


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(paths: tuple[Path, ...]) -> None:
    """Check rule files; print a summary of the rules or every error (file, rule, field)."""
    from aggregator.core.rules import load_rules

    rules = load_rules(paths)  # every check, the derived rules' attributes included
    table = Table(title=f"{len(rules)} rule(s) valid", title_justify="left")
    table.add_column("rule", no_wrap=True)
    for column in ("key", "delta", "reads", "options"):
        table.add_column(column)
    for r in rules:
        delta = (
            str(r.delta.constant) if r.delta.constant is not None else f"{{{r.delta.attribute}}}"
        )
        options = []
        if r.leaderboard:
            partitions = r.leaderboard_partitions
            options.append("leaderboard" + (f" over {partitions}" if partitions > 1 else ""))
        if r.write_shards > 1:
            options.append(f"write_shards={r.write_shards}")
        if r.ttl_deletes != "keep":
            options.append(f"ttl_deletes={r.ttl_deletes}")
        if r.source is not None:
            options.append(f"source={r.source}")
        if r.window is not None:
            from aggregator.core.windows import format_duration

            w = r.window
            labels = "+".join(g.label for g in w.granularities)
            kept = "forever" if w.retention is None else format_duration(w.retention)
            options.append(f"per {labels} of {w.time}, kept {kept}")
        table.add_row(
            r.name, r.key.template, delta, ", ".join(sorted(r.attributes())), " ".join(options)
        )
    console.print(table)


@click.command("filter-criteria")
@_definitions_option
@click.option(
    "--check",
    "template",
    default=None,
    type=click.Path(path_type=Path),
    help="Check this SAM template's stream filters instead of printing them",
)
def filter_criteria_cmd(definitions: RuleSources, template: Path | None) -> None:
    """Print the event source mapping's FilterCriteria for the rules (JSON), or --check that a
    template carries them. Derived rules need their source aggregates let through."""
    import json

    from aggregator.core.rules import load_rules
    from aggregator.runtime.filters import check_template, filter_criteria

    rules = load_rules(definitions)
    if template is None:
        click.echo(json.dumps(filter_criteria(rules), indent=2))
        return
    problems = check_template(template, rules)
    for problem in problems:
        err_console.print(Text(problem), highlight=False)
    if problems:
        raise SystemExit(1)
    console.print(f"{template}: stream filters match the rules in {definitions}")


@click.command("template")
@_definitions_option
@click.argument(
    "template",
    default=Path("template.yaml"),
    required=False,
    type=click.Path(path_type=Path),
)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 if the template is not rendered for the rules, instead of rewriting it",
)
def template_cmd(definitions: RuleSources, template: Path, check: bool) -> None:
    """Render the parts of a SAM template (default template.yaml) that follow from the rules:
    the created table's keys and indexes, the role's leading keys and the stream filters."""
    from aggregator.cli.template import check_template_regions, render_template
    from aggregator.core.exceptions import ConfigError
    from aggregator.core.rules import load_rules

    rules = load_rules(definitions)
    if check:
        if not check_template_regions(template, rules):
            err_console.print(
                f"{template}: not rendered for the rules in {definitions}; run: aggregator "
                f"template {definitions.options()} {template}",
                highlight=False,
                markup=False,
            )
            raise SystemExit(1)
        console.print(f"{template}: rendered for the rules in {definitions}", highlight=False)
        return
    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{template}: cannot read the template: {exc.strerror}") from None
    rendered = render_template(text, rules, source=str(template))
    if rendered == text:
        console.print(f"{template}: already rendered for the rules in {definitions}")
        return
    template.write_text(rendered, encoding="utf-8")
    console.print(f"{template}: rendered for the rules in {definitions}", highlight=False)
