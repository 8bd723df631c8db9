"""``dead-letters`` and ``replay-dead-letters``: list the records rules could not evaluate,
and re-apply them once the rules are fixed."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

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

_REPAIR = {
    "missing-attribute": "fix the item, then: aggregator reconcile --repair --rules {rule}",
    "wrong-type": "fix the item, then: aggregator reconcile --repair --rules {rule}",
    "invalid-value": "fix the item, then: aggregator reconcile --repair --rules {rule}",
    "limit-exceeded": "change the rule (a shorter key), rebuild it: aggregator rebuild {rule}",
    "missing-image": "set the stream's view type to NEW_AND_OLD_IMAGES (aggregator "
    "prepare-table), then: aggregator replay-dead-letters",
    "malformed-record": "nothing to replay: the record itself is malformed",
}
"""How to heal each cause of dead letter ({rule}: the letter's rule). A rule that was wrong
(fixed and deployed) replays its letters with replay-dead-letters."""


def _key_text(key: dict[str, str] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in key.items()) if key else "(unknown)"


@click.command("dead-letters")
@_table_option
@_layout_definitions_option
@_endpoint_option
@click.option("--json", "as_json", is_flag=True, help="Print the dead letters as JSON")
def dead_letters_cmd(
    table_name: str, definitions: RuleSources | None, endpoint_url: str | None, as_json: bool
) -> None:
    """List records a rule could not evaluate, and malformed records (rule *): the item's
    table key, the failing attribute and the cause, with how to repair each; replayable ones
    apply with replay-dead-letters once the rules are fixed."""
    import json

    from aggregator.dynamodb.deadletters import list_dead_letters

    layout = layout_of(definitions)  # a bad rule file is reported before any AWS call
    client = clients.make_client("dynamodb", endpoint_url)
    letters = list(list_dead_letters(client, table_name, layout=layout))
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "shard_id": d.shard_id,
                        "sequence_number": d.sequence_number or None,
                        "rule": d.rule,
                        "item_key": d.item_key,
                        "attribute": d.attribute,
                        "cause": d.cause,
                        "reason": d.reason,
                        "replayable": d.replayable,
                        "record_form": d.record_form,
                        "failed_at": d.failed_at,
                        "repair": _REPAIR.get(d.cause, "").format(rule=d.rule),
                    }
                    for d in letters
                ],
                indent=2,
            )
        )
        return
    replayable = sum(d.replayable for d in letters)
    table = Table(
        title=f"{len(letters)} dead letter(s), {replayable} replayable", title_justify="left"
    )
    for column in (
        "rule",
        "item key",
        "attribute",
        "cause",
        "reason",
        "sequence number",
        "replayable",
    ):
        table.add_column(column)
    for d in letters:
        kept = "yes" if d.replayable else f"no ({d.record_form})"
        table.add_row(
            Text(d.rule),
            Text(_key_text(d.item_key)),
            Text(d.attribute or ""),
            d.cause,
            Text(d.reason),
            d.sequence_number or "(none)",
            kept,
        )
    console.print(table)
    for cause in sorted({d.cause for d in letters}):
        rules = sorted({d.rule for d in letters if d.cause == cause})
        repair = _REPAIR.get(cause, "")
        if repair:
            text = repair.format(rule=",".join(rules))
            console.print(Text(f"{cause}: {text}"), highlight=False)


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
