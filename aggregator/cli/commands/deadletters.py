"""``dead-letters`` and ``replay-dead-letters``: list the records rules could not evaluate,
whether each item is still bad or has healed since, clear the healed ones, and re-apply the
records of which nothing applied once their rule evaluates them."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import click
from rich.table import Table
from rich.text import Text

from aggregator.cli import clients
from aggregator.cli.options import (
    RuleSources,
    default_rule_sources,
    definitions_option,
    endpoint_option,
    layout_definitions_option,
    table_option,
)
from aggregator.cli.output import console

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from aggregator.core.layout import TableLayout
    from aggregator.core.rules import RuleSet
    from aggregator.dynamodb.deadletters import DeadLetter, LetterState

_HEAL = "fix the item (or delete it): its aggregate heals when it is written; then: aggregator \
dead-letters --clear-healed"
_REPAIR = {
    "missing-attribute": _HEAL,
    "wrong-type": _HEAL,
    "invalid-value": _HEAL,
    "limit-exceeded": "change the rule (a shorter key) and rebuild it: aggregator rebuild {rule}",
    "missing-image": "set the stream's view type to NEW_AND_OLD_IMAGES (aggregator "
    "prepare-table), then: aggregator reconcile --repair --rules {rule}",
    "malformed-record": "nothing to replay: the record itself is malformed",
}
"""How to heal each cause of dead letter ({rule}: the letter's rule). A letter of which nothing
applied (state ``replay``: a sum past 38 digits, letters of earlier releases) replays with
replay-dead-letters once its rule evaluates it."""


def _key_text(key: dict[str, str] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in key.items()) if key else "(unknown)"


def _stored_rules(client: DynamoDBClient, table_name: str, rules: RuleSet) -> RuleSet:
    """``rules`` named as their letters name them: a rebuilt rule's by its generation
    (``"<rule>@<n>"``, from the table's manifest).

    Raises
    ------
    ConfigError
        When the manifest and the rules disagree
        (:func:`~aggregator.core.lifecycle.resolved_rules`).
    """
    from aggregator.core.exceptions import ConfigError
    from aggregator.core.lifecycle import resolved_rules
    from aggregator.dynamodb.manifest import Manifest

    try:
        return resolved_rules(rules, Manifest(client, table_name, rules.layout).load())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _given_rules(definitions: RuleSources | None, clear_healed: bool) -> RuleSet | None:
    """The rules given with ``-d`` (or found by default), ``None`` when there are none; a bad
    rule file is reported before any AWS call.

    Raises
    ------
    ConfigError
        When ``--clear-healed`` has no rules to judge the letters' items by.
    """
    from aggregator.core.exceptions import ConfigError
    from aggregator.core.rules import load_rules

    sources = definitions if definitions is not None else default_rule_sources()
    if clear_healed and sources is None:
        raise ConfigError(
            "--clear-healed judges each letter's item by the rules: give them with -d FILE|DIR"
        )
    return load_rules(sources) if sources is not None else None


def _clear_healed(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet | None,
    layout: TableLayout,
    letters: list[DeadLetter],
    as_json: bool,
) -> None:
    """Delete the letters of healed items (none without rules) and print how many went and how
    many are left."""
    import json

    from aggregator.dynamodb.deadletters import clear_healed_dead_letters

    cleared, left = (
        clear_healed_dead_letters(client, table_name, rules, layout=layout, letters=letters)
        if rules is not None
        else (0, 0)
    )
    if as_json:
        click.echo(json.dumps({"cleared": cleared, "left": left}))
    else:
        console.print(f"cleared {cleared} healed dead letter(s); {left} left", highlight=False)


def _letter_json(st: LetterState) -> dict[str, object]:
    """One letter and its state as the ``--json`` list holds it."""
    d = st.letter
    return {
        "shard_id": d.shard_id,
        "sequence_number": d.sequence_number or None,
        "rule": d.rule,
        "item_key": d.item_key,
        "attribute": d.attribute,
        "cause": d.cause,
        "reason": d.reason,
        "image": d.image,
        "state": st.state,
        "state_detail": st.detail,
        "replayable": d.replayable,
        "record_form": d.record_form,
        "failed_at": d.failed_at,
        "repair": _REPAIR.get(d.cause, "").format(rule=d.rule),
    }


def _letters_table(letters: int, states: list[LetterState], counts: Counter[str]) -> Table:
    """The letters as a table, one row each, titled with their number per state."""
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    table = Table(
        title=f"{letters} dead letter(s)" + (f": {summary}" if summary else ""),
        title_justify="left",
    )
    for column in ("rule", "item key", "attribute", "cause", "reason", "sequence number", "state"):
        table.add_column(column)
    for st in states:
        d = st.letter
        table.add_row(
            Text(d.rule),
            Text(_key_text(d.item_key)),
            Text(d.attribute or ""),
            d.cause,
            Text(d.reason),
            d.sequence_number or "(none)",
            Text(f"{st.state} ({st.detail})" if st.detail else st.state),
        )
    return table


def _print_next_steps(states: list[LetterState], counts: Counter[str]) -> None:
    """How to clear the healed letters, replay the replayable ones, and repair each cause of the
    open and stuck ones."""
    if counts["healed"]:
        console.print(
            f"healed: {counts['healed']} item(s) fixed or deleted since; clear their letters "
            "with: aggregator dead-letters --clear-healed",
            highlight=False,
        )
    if counts["replay"]:
        console.print(
            f"replay: {counts['replay']} letter(s) of which nothing applied: aggregator "
            "replay-dead-letters",
            highlight=False,
        )
    for cause in sorted({st.letter.cause for st in states if st.state in ("open", "stuck")}):
        names = sorted({st.letter.rule for st in states if st.letter.cause == cause})
        repair = _REPAIR.get(cause, "")
        if repair:
            console.print(Text(f"{cause}: {repair.format(rule=','.join(names))}"), highlight=False)


@click.command("dead-letters", short_help="List the records the rules could not evaluate.")
@table_option
@layout_definitions_option
@endpoint_option
@click.option("--json", "as_json", is_flag=True, help="Print the dead letters as JSON")
@click.option(
    "--clear-healed",
    is_flag=True,
    help="Delete the letters whose item has since been fixed or deleted (their aggregates "
    "already count the item as it is)",
)
def dead_letters_cmd(
    table_name: str,
    definitions: RuleSources | None,
    endpoint_url: str | None,
    as_json: bool,
    clear_healed: bool,
) -> None:
    """List records a rule could not evaluate, and malformed records (rule *): the item's
    table key, the failing attribute, the cause, whether the item is still bad (open) or has
    been fixed or deleted since (healed), and how to repair each.

    A bad item counts nothing until the application fixes it; its aggregates then heal with no
    replay, and --clear-healed deletes the letters of healed items."""
    import json

    from aggregator.core.layout import DEFAULT_LAYOUT
    from aggregator.dynamodb.deadletters import letter_states, list_dead_letters

    given = _given_rules(definitions, clear_healed)
    layout = given.layout if given is not None else DEFAULT_LAYOUT
    client = clients.make_client("dynamodb", endpoint_url)
    letters = list(list_dead_letters(client, table_name, layout=layout))
    rules = _stored_rules(client, table_name, given) if letters and given is not None else None
    if clear_healed:
        _clear_healed(client, table_name, rules, layout, letters, as_json)
        return
    states = letter_states(client, table_name, letters, rules, layout=layout)
    if as_json:
        click.echo(json.dumps([_letter_json(st) for st in states], indent=2))
        return
    counts = Counter(st.state for st in states)
    console.print(_letters_table(len(letters), states, counts))
    _print_next_steps(states, counts)


@click.command("replay-dead-letters", short_help="Re-apply dead-lettered records, exactly once.")
@table_option
@definitions_option
@endpoint_option
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
    """Re-apply, exactly once, the dead-lettered records of which nothing applied (state
    replay in dead-letters), with the current rules. Letters of bad items are never replayed:
    the aggregate heals when the application fixes the item."""
    from aggregator.core.exceptions import ConfigError
    from aggregator.core.rules import load_rules
    from aggregator.core.windows import parse_duration
    from aggregator.dynamodb.deadletters import replay_dead_letters

    try:
        min_age_seconds = 0 if min_age.strip() == "0" else parse_duration(min_age)
    except ValueError as exc:
        raise ConfigError(f"--min-age: {exc}") from None
    rules = load_rules(definitions)
    client = clients.make_client("dynamodb", endpoint_url)
    # letters of a rebuilt rule name its generation ("<rule>@<n>"): replay into that generation
    rules = _stored_rules(client, table_name, rules)
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
        + (
            f"; {result.heal_by_fixing} letter(s) of bad items left alone (they heal when the "
            "item is fixed: aggregator dead-letters)"
            if result.heal_by_fixing
            else ""
        ),
        highlight=False,
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
