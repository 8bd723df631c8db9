"""``validate`` and ``filter-criteria``: commands over rule files, no table needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from aggregator.cli.options import RuleSources, definitions_option, rule_paths_option
from aggregator.cli.output import console, err_console


def _rule_summary(r: Any) -> dict[str, Any]:
    """One rule as ``validate`` shows it: ``name``, ``kind`` (with its options), ``key``,
    ``delta``, ``reads`` (the attributes it reads, sorted), ``options`` (leaderboard, target,
    write sharding, TTL policy, source, window, thresholds; text) and ``thresholds`` (each as
    ``{"name", "condition", "granularity", "keys"}``, ``granularity`` ``None`` for every
    granularity, ``keys`` ``None`` for every key)."""
    delta = str(r.delta.constant) if r.delta.constant is not None else f"{{{r.delta.attribute}}}"
    options = []
    if r.leaderboard:
        partitions = r.leaderboard_partitions
        options.append(
            "leaderboard"
            + (" in top lists" if r.top_listed else "")
            + (f" over {partitions}" if partitions > 1 else "")
        )
    if r.target is not None:
        where = r.target.partition_key.template
        if r.target.sort_key is not None:
            where += f" / {r.target.sort_key.template}"
        options.append(f"target {r.target.attribute} on {where}")
    if r.sharded:
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
    if r.thresholds:
        options.append("thresholds " + ", ".join(_threshold_text(t) for t in r.thresholds))
    return {
        "name": r.name,
        "kind": r.kind.describe(),
        "key": r.key.template,
        "delta": delta,
        "reads": sorted(r.attributes()),
        "options": options,
        "thresholds": [
            {
                "name": t.name,
                "condition": t.condition,
                "granularity": t.granularity,
                "keys": None if t.keys is None else [*t.keys],
            }
            for t in r.thresholds
        ],
    }


MAX_KEYS_SHOWN = 5
"""Most keys of a threshold ``validate`` names in its table (then how many more)."""


def _threshold_text(t: Any) -> str:
    """``popular above 1000``, ``quiet below 2 (keys p1, p2)``, ``hot above 100 per hour``."""
    text = f"{t.name} {t.condition}"
    if t.granularity is not None:
        text += f" per {t.granularity}"
    if t.keys is not None:
        shown = ", ".join(t.keys[:MAX_KEYS_SHOWN])
        more = len(t.keys) - MAX_KEYS_SHOWN
        text += f" (keys {shown}{f' and {more} more' if more > 0 else ''})"
    return text


def _unversioned(paths: tuple[Path, ...]) -> list[str]:
    """The rule files among ``paths`` (directories expanded) without a ``version:`` field."""
    import yaml

    from aggregator.core.rules import RuleLoader, rule_files_in

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += rule_files_in(path)
        else:
            files.append(path)
    missing = []
    for file in files:
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=RuleLoader)  # loaded before
        if isinstance(data, dict) and "version" not in data:
            missing.append(str(file))
    return missing


@click.command(short_help="Check rule files; print their rules or their errors.")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@rule_paths_option(
    "Rule file or directory, as the other commands take it (repeatable)", dest="more"
)
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON")
def validate(paths: tuple[Path, ...], more: tuple[Path, ...], as_json: bool) -> None:
    """Check rule files (PATHS and -d; without either ./rules, else ./definitions, as every
    command); print a summary of the rules or every error (file, rule, field)."""
    import json

    from aggregator.cli.options import rule_sources
    from aggregator.core.rules import load_rules

    ctx = click.get_current_context()
    paths = tuple(rule_sources(ctx, ctx.command.params[0], paths + more))

    rules = load_rules(paths)  # every check, the derived rules' attributes included
    notes = [
        f"{file}: no 'version:' field; version 1 is assumed (write 'version: 1' first)"
        for file in _unversioned(paths)
    ]
    summaries = [_rule_summary(r) for r in rules]
    if as_json:
        click.echo(json.dumps({"rules": summaries, "notes": notes}, indent=2))
        return
    table = Table(title=f"{len(rules)} rule(s) valid", title_justify="left")
    table.add_column("rule", no_wrap=True)
    for column in ("kind", "key", "delta", "reads", "options"):
        table.add_column(column)
    for s in summaries:
        cells = (s["kind"], s["key"], s["delta"], ", ".join(s["reads"]), "; ".join(s["options"]))
        # Text: a key or a threshold's key with [brackets] is not read as rich markup
        table.add_row(s["name"], *(Text(cell) for cell in cells))
    console.print(table)
    for note in notes:
        err_console.print(Text(f"note: {note}"), highlight=False)


@click.command(
    "filter-criteria", short_help="Print the stream filters for the rules, or check them."
)
@definitions_option
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
    from aggregator.deploy.filters import check_template, filter_criteria

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


@click.command("template", short_help="Render the template's parts that follow from the rules.")
@definitions_option
@click.argument(
    "template",
    default=Path("template.yaml"),
    required=False,
    type=click.Path(path_type=Path),
)
@click.option(
    "--check",
    is_flag=True,
    help="Check instead of rewriting: exit 1, naming the command to run, if the template is "
    "not rendered for the rules",
)
def template_cmd(definitions: RuleSources, template: Path, check: bool) -> None:
    """Render the parts of a SAM template (default template.yaml) that follow from the rules:
    the created table's keys and indexes, the role's leading keys and the stream filters."""
    from aggregator.cli.template import check_template_regions, render_template
    from aggregator.core.exceptions import ConfigError
    from aggregator.core.rules import load_rules

    rules = load_rules(definitions)
    if check:  # one line each: current (exit 0), or not, with the command that renders it (1)
        if not check_template_regions(template, rules):
            raise ConfigError(
                f"{template}: not rendered for the rules in {definitions}; run: aggregator "
                f"template {definitions.options()} {template}"
            )
        _say(f"{template}: up to date with the rules in {definitions}")
        return
    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{template}: cannot read the template: {exc.strerror}") from None
    rendered = render_template(text, rules, source=str(template))
    if rendered == text:
        _say(f"{template}: already rendered for the rules in {definitions}")
        return
    template.write_text(rendered, encoding="utf-8")
    _say(f"{template}: rendered for the rules in {definitions}")


def _say(line: str) -> None:
    """One line on stdout as it is: no highlighting, no markup, never wrapped."""
    console.print(Text(line), highlight=False)
