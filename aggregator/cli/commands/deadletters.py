"""``dead-letters`` and ``replay-dead-letters``: list the records rules could not evaluate,
and re-apply them once the rules are fixed."""

from __future__ import annotations

import click
from rich.table import Table

from aggregator.cli import clients
from aggregator.cli.options import (
    RuleSources,
    _definitions_option,
    _endpoint_option,
    _layout_definitions_option,
    _table_option,
    layout_of,
)
from aggregator.cli.output import console


@click.command("dead-letters")
@_table_option
@_layout_definitions_option
@_endpoint_option
def dead_letters_cmd(
    table_name: str, definitions: RuleSources | None, endpoint_url: str | None
) -> None:
    """List records a rule could not evaluate, and malformed records (rule *): skipped, kept
    with their cause; replayable ones apply with replay-dead-letters once the rules are fixed."""
    from aggregator.dynamodb.deadletters import list_dead_letters

    layout = layout_of(definitions)  # a bad rule file is reported before any AWS call
    client = clients.make_client("dynamodb", endpoint_url)
    letters = list(list_dead_letters(client, table_name, layout=layout))
    replayable = sum(d.replayable for d in letters)
    table = Table(
        title=f"{len(letters)} dead letter(s), {replayable} replayable", title_justify="left"
    )
    for column in (
        "shard",
        "sequence number",
        "rule",
        "cause",
        "replayable",
        "reason",
        "failed at",
    ):
        table.add_column(column)
    for d in letters:
        kept = "yes" if d.replayable else f"no ({d.record_form})"
        table.add_row(
            d.shard_id,
            d.sequence_number or "(none)",
            d.rule,
            d.cause,
            kept,
            d.reason,
            d.failed_at,
        )
    console.print(table)


@click.command("replay-dead-letters")
@_table_option
@_definitions_option
@_endpoint_option
@click.option(
    "--min-age",
    default="25h",
    show_default=True,
    help="Replay only letters at least this old (e.g. 25h, 90m, 0): until the stream's records "
    "are past the event source mapping's maximum record age (24 h in template.yaml), Lambda may "
    "deliver them again, and a replayed letter could be applied twice",
)
def replay_dead_letters_cmd(
    table_name: str, definitions: RuleSources, endpoint_url: str | None, min_age: str
) -> None:
    """Re-apply dead-lettered records exactly once with the current (fixed) rules."""
    from aggregator.core.exceptions import ConfigError
    from aggregator.core.lifecycle import resolved_rules
    from aggregator.core.rules import load_rules
    from aggregator.core.windows import parse_duration
    from aggregator.dynamodb.deadletters import replay_dead_letters
    from aggregator.dynamodb.manifest import Manifest

    try:
        min_age_seconds = 0 if min_age.strip() == "0" else parse_duration(min_age)
    except ValueError as exc:
        raise ConfigError(f"--min-age: {exc}") from None
    rules = load_rules(definitions)
    client = clients.make_client("dynamodb", endpoint_url)
    # letters of a rebuilt rule name its generation ("<rule>@<n>"): replay into that generation
    try:
        rules = resolved_rules(rules, Manifest(client, table_name, rules.layout).load())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    result = replay_dead_letters(
        client,
        table_name,
        rules,
        layout=rules.layout,
        min_age_seconds=min_age_seconds,
    )
    console.print(
        f"replayed {result.replayed}, no change {result.no_change}, "
        f"already replayed {result.already_replayed}, too recent {result.too_recent}, "
        f"still failing {len(result.still_failing)}"
    )
    if result.too_recent:
        console.print(
            f"  {result.too_recent} letter(s) younger than {min_age} left for a later replay "
            "(--min-age 0 replays them now, if no batch of theirs can be delivered again)",
            highlight=False,
        )
    for line in result.still_failing:
        console.print(f"  {line}", highlight=False)
    if result.still_failing:
        raise SystemExit(1)
