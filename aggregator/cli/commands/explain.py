"""``explain``: what the rules make of one item or one stream record (:mod:`aggregator.core.
explain`), as a tree or JSON."""

from __future__ import annotations

import json
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text as _RichText
from rich.tree import Tree

from aggregator.cli.options import (
    RuleSources,
    check_table_name,
    definitions_option,
    endpoint_option,
)
from aggregator.cli.output import console
from aggregator.core.exceptions import ConfigError

if TYPE_CHECKING:
    from aggregator.core.engine import CoalescedDelta
    from aggregator.core.explain import RecordExplanation, RuleExplanation
    from aggregator.core.layout import TableLayout
    from aggregator.core.rules import RuleSet


def Text(text: str) -> _RichText:
    """Text that wraps in the tree instead of being cut at the terminal's width."""
    return _RichText(text, overflow="fold")


_TAGS = frozenset({"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"})


def _read_json(source: str, what: str) -> Any:
    """JSON from a file, or standard input for ``-``; numbers as exact ``Decimal``.

    Raises
    ------
    ConfigError
        When the file cannot be read or is not JSON.
    """
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the {what}: {exc.strerror}") from None
    try:
        return json.loads(text, parse_float=Decimal, parse_int=Decimal, parse_constant=Decimal)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: the {what} is not JSON: {exc}") from None


def is_dynamodb_json(item: Any) -> bool:
    """Whether ``item`` is already DynamoDB JSON: every attribute a one-key mapping whose key
    is a type tag (``{"pk": {"S": "a"}}``). An empty item counts as plain."""
    return (
        isinstance(item, dict)
        and bool(item)
        and all(
            isinstance(v, dict) and len(v) == 1 and next(iter(v)) in _TAGS for v in item.values()
        )
    )


def _attribute_value(value: Any) -> dict[str, Any]:
    """A plain JSON value as a DynamoDB attribute value, numbers as their exact text (a number
    DynamoDB cannot hold is left for the rules to report, as the handler would)."""
    if isinstance(value, bool):
        return {"BOOL": value}
    if value is None:
        return {"NULL": True}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, Decimal):
        return {"N": str(value)}
    if isinstance(value, list):
        return {"L": [_attribute_value(v) for v in value]}
    if isinstance(value, dict):
        return {"M": {str(k): _attribute_value(v) for k, v in value.items()}}
    raise ConfigError(f"a value of type {type(value).__name__} has no DynamoDB type")


def to_image(item: Any, source: str) -> dict[str, Any]:
    """An item, plain or DynamoDB JSON (detected), as a DynamoDB-JSON attribute map.

    Raises
    ------
    ConfigError
        When the item is not a JSON object.
    """
    if not isinstance(item, dict):
        raise ConfigError(f"{source}: an item is a JSON object, got {type(item).__name__}")
    if is_dynamodb_json(item):
        return item
    return {name: _attribute_value(value) for name, value in item.items()}


def _live_item(
    table_name: str, keys: tuple[str, ...], definitions: RuleSources, endpoint_url: str | None
) -> tuple[dict[str, Any], RuleSet]:
    """``(DynamoDB-JSON item, rules)`` read with a strongly consistent ``GetItem``."""
    from aggregator.cli.tables import rules_for_table
    from aggregator.dynamodb.client import requests_of

    client, rules = rules_for_table(table_name, definitions, endpoint_url)
    key: dict[str, Any] = {}
    for text in keys:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise ConfigError(f"--key {text!r}: give NAME=VALUE, e.g. --key pk=POST#1")
        key[name] = {"S": value}  # the layout's keys are strings (check-table)
    layout = rules.layout
    wanted = [k for k in (layout.partition_key, layout.sort_key) if k is not None]
    if sorted(key) != sorted(wanted):
        raise ConfigError(
            f"--key: table {table_name!r} is keyed by {', '.join(wanted)} (the rules' table: "
            f"section); give --key {' --key '.join(f'{k}=...' for k in wanted)}"
        )
    item = (
        requests_of(client)
        .send("get_item", TableName=table_name, Key=key, ConsistentRead=True)
        .get("Item")
    )
    if item is None:
        shown = ", ".join(f"{k}={v['S']}" for k, v in key.items())
        raise ConfigError(f"table {table_name!r} has no item {shown}")
    return item, rules


def _target_text(layout: TableLayout, values: tuple[str, ...]) -> str:
    """An application item's key as ``PK=POST#1, SK=META``."""
    names = layout.key_attributes
    return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=False))


def _rule_tree(parent: Tree, explanations: list[RuleExplanation], layout: TableLayout) -> None:
    for e in explanations:
        # a kind other than sum is named: its amounts go to value items or to a count too
        name = e.rule if e.kind == "sum" else f"{e.rule} ({e.kind})"
        if e.cause is not None:
            verdict = "matched, but cannot" if e.matched else "cannot"
            parent.add(Text(f"{name}: {verdict} be evaluated ({e.cause}): {e.reason}"))
        elif not e.matched:
            parent.add(Text(f"{name}: not matched: {e.reason}"))
        else:
            node = parent.add(Text(f"{name}: matched"))
            for c in e.contributions:
                if c.target is not None:
                    where = f"{c.target_attribute} of the item {_target_text(layout, c.target)}"
                    node.add(Text(f"key {c.key} ({where}): {c.amount:+}"))
                    continue
                bucket = f", {c.granularity} bucket {c.bucket}" if c.granularity else ""
                if c.partition is not None:  # a spread rule: which partition key value
                    bucket += f", under {layout.partition_key} {c.partition}"
                node.add(Text(f"key {c.key} (sort key {c.sort_key}{bucket}): {c.amount:+}"))


def _update_text(layout: TableLayout, change: CoalescedDelta) -> str:
    from aggregator.dynamodb.updates import aggregate_update, resolved

    if change.target_attribute is not None:  # the application's item (dynamodb.targets)
        return (
            f"ADD {change.target_attribute} {change.amount} on condition the item exists (the "
            f"exactly-once modes also SET its shard's entry of "
            f"{layout.target_checkpoints_attribute}); if it does not, the rule's ledger item "
            f"{change.ref.sort_key} gets the ADD instead"
        )

    update = resolved(aggregate_update(layout, change, change.amount).render())
    parts = [f"ADD {k} {v['N']}" for k, v in update["ADD"].items()]
    parts += [f"SET {k} = {next(iter(v.values()))}" for k, v in update["SET"].items()]
    return "; ".join(parts)


def _live_table(
    item: str | None, record_source: str | None, table_name: str | None, keys: tuple[str, ...]
) -> str | None:
    """``--table``, unless it only comes from AGGREGATOR_TABLE_NAME and there is no ``--key``
    live item to read (the variable names the table only for ``--key``)."""
    ctx = click.get_current_context()
    from_environment = (
        ctx.get_parameter_source("table_name") == click.core.ParameterSource.ENVIRONMENT
    )
    if from_environment and (item is not None or record_source is not None or not keys):
        return None  # AGGREGATOR_TABLE_NAME names the table only for --key
    return table_name


def _check_one_thing(item: str | None, record_source: str | None, table_name: str | None) -> None:
    """Check that exactly one thing is given to explain.

    Raises
    ------
    ConfigError
        When none is given, or more than one.
    """
    given = [item is not None, record_source is not None, table_name is not None]
    what = "an ITEM file (or -), --record FILE, or --table T --key NAME=VALUE ..."
    if sum(given) == 0:
        raise ConfigError(f"nothing to explain: give {what}")
    if sum(given) > 1:
        raise ConfigError(f"explain one thing at a time: {what}")


def _stream_records(raw: Any) -> list[Any]:
    """The records of a Lambda event (``sam local generate-event dynamodb update``), or
    ``[raw]`` for a single record."""
    return (
        raw["Records"] if isinstance(raw, dict) and isinstance(raw.get("Records"), list) else [raw]
    )


def _explain_records(
    record_source: str, definitions: RuleSources, as_json: bool, now: float
) -> None:
    """Explain each stream record of ``record_source``: a tree per record, or one JSON document
    (a list when there are several records)."""
    from aggregator.core.engine import Engine
    from aggregator.core.explain import explain_record
    from aggregator.core.records import MalformedRecord, parse_record
    from aggregator.core.rules import load_rules

    rules = load_rules(definitions)
    records = _stream_records(_read_json(record_source, "stream record"))
    engine = Engine(rules)
    explained_all: list[dict[str, Any]] = []
    for one in records:
        record = parse_record(one)
        if isinstance(record, MalformedRecord):
            if as_json:
                explained_all.append({"record": None, "malformed": record.reason})
            else:
                console.print(
                    Text(
                        f"malformed stream record: {record.reason} (the handler "
                        "dead-letters it, cause malformed-record; no rule reads it)"
                    )
                )
            continue
        explained = explain_record(engine, record, now=now)
        if as_json:
            explained_all.append(_record_json(explained, rules.layout))
        else:
            _print_record(explained, rules.layout)
    if as_json:
        data: Any = explained_all if len(records) > 1 else explained_all[0]
        click.echo(json.dumps(data, indent=2, default=str))


def _image_to_explain(
    item: str | None,
    table_name: str | None,
    keys: tuple[str, ...],
    definitions: RuleSources,
    endpoint_url: str | None,
) -> tuple[dict[str, Any], RuleSet, str]:
    """``(DynamoDB-JSON item, rules, where it comes from)``: the live item of ``table_name``,
    else the ITEM file's."""
    from aggregator.core.rules import load_rules

    if table_name is not None:
        image_raw, rules = _live_item(table_name, keys, definitions, endpoint_url)
        return image_raw, rules, f"table {table_name}"
    assert item is not None
    rules = load_rules(definitions)
    image_raw = to_image(_read_json(item, "item"), item)
    return image_raw, rules, "standard input" if item == "-" else item


def _explain_item(
    image_raw: dict[str, Any], rules: RuleSet, source: str, as_json: bool, now: float
) -> None:
    """Explain one item: per rule, as a tree or JSON."""
    from aggregator.core.engine import Engine
    from aggregator.core.explain import explain_image
    from aggregator.core.records import Image

    engine = Engine(rules)
    explanations = explain_image(engine, Image(image_raw), now=now)
    if as_json:
        click.echo(
            json.dumps({"item": source, "rules": [e.to_json() for e in explanations]}, indent=2)
        )
        return
    tree = Tree(Text(f"item from {source}: {len(image_raw)} attribute(s)"))
    _rule_tree(tree, explanations, rules.layout)
    console.print(tree, soft_wrap=False)


@click.command("explain", short_help="Show what the rules make of an item or a stream record.")
@click.argument("item", required=False)
@definitions_option
@click.option("--record", "record_source", help="A stream record (JSON file, or - for stdin)")
@click.option(
    "--table",
    "table_name",
    envvar="AGGREGATOR_TABLE_NAME",
    callback=check_table_name,
    help="Explain the live item of this table (with --key) [env AGGREGATOR_TABLE_NAME]",
)
@click.option("--key", "keys", multiple=True, help="NAME=VALUE of the live item's key (repeat)")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as JSON")
@endpoint_option
def explain_cmd(
    item: str | None,
    definitions: RuleSources,
    record_source: str | None,
    table_name: str | None,
    keys: tuple[str, ...],
    as_json: bool,
    endpoint_url: str | None,
) -> None:
    """What the rules make of ITEM (a JSON file, or - for stdin; plain or DynamoDB JSON), of a
    stream record (--record FILE, both images; a Lambda event's records one by one), or of a
    live item (--table T --key NAME=VALUE
    ...): per rule, matched or not (the first failing test and the value it saw), the aggregate
    key as query shows it, its sort key, time bucket and delta; for a record, the net change
    per aggregate and the update the handler sends, or why it sends none."""
    table_name = _live_table(item, record_source, table_name, keys)
    _check_one_thing(item, record_source, table_name)
    now = time.time()
    if record_source is not None:
        _explain_records(record_source, definitions, as_json, now)
        return
    image_raw, rules, source = _image_to_explain(item, table_name, keys, definitions, endpoint_url)
    _explain_item(image_raw, rules, source, as_json, now)


def _record_json(explained: RecordExplanation, layout: TableLayout) -> dict[str, Any]:
    return {
        "record": {
            "event_name": explained.event_name,
            "sequence_number": explained.sequence_number,
            "keys": explained.keys,
        },
        "old_image": None if explained.old is None else [e.to_json() for e in explained.old],
        "new_image": None if explained.new is None else [e.to_json() for e in explained.new],
        "changes": [
            {
                "rule": c.ref.rule,
                "key": c.ref.display_key,
                "sort_key": c.ref.sort_key,
                "amount": str(c.amount),
                "partial": c.ref.partial,
                "auto_shards": c.auto_shards,
                "update": _update_text(layout, c),
                **(
                    {"partition": c.partition(layout)}
                    if c.partitions > 1 and not c.ref.partial and c.target_attribute is None
                    else {}
                ),
            }
            for c in explained.changes
        ],
        "dead_letters": [
            {"rule": f.rule, "reason": f.reason, "cause": str(f.cause), "image": f.image}
            for f in explained.failures
        ],
        "notes": explained.notes,
    }


def _print_record(explained: RecordExplanation, layout: TableLayout) -> None:
    keys = ", ".join(f"{k}={next(iter(v.values()))}" for k, v in explained.keys.items())
    tree = Tree(Text(f"{explained.event_name} record {explained.sequence_number} of item {keys}"))
    for label, explanations in (("OldImage", explained.old), ("NewImage", explained.new)):
        node = tree.add(Text(label if explanations is not None else f"{label}: none"))
        if explanations is not None:
            _rule_tree(node, explanations, layout)
    changes = tree.add(
        Text("what the handler writes" if explained.changes else "the handler writes nothing")
    )
    for c in explained.changes:
        partial = " (to one of its partials)" if c.ref.partial else ""
        if c.auto_shards:
            partial = (
                " (write_shards: auto: to one of its partials if the record's shard had switched "
                "to them when the record was written, else to the aggregate; aggregator status "
                "shows the shards on partials now)"
            )
        node = changes.add(Text(f"{c.ref.rule} {c.ref.display_key}{partial}: {c.amount:+}"))
        where = (
            _target_text(layout, c.ref.target or ())
            if c.target_attribute is not None
            else c.ref.sort_key
        )
        if c.target_attribute is None and not c.ref.partial and c.partitions > 1:
            where += f" under {layout.partition_key} {c.partition(layout)}"  # a spread rule
        node.add(Text(f"UpdateItem {where}: {_update_text(layout, c)}"))
    for f in explained.failures:
        counts = (
            "; the item counts nothing for it until it is fixed"
            if f.image is not None
            else "; nothing of the record applies for it"
        )
        changes.add(Text(f"dead letter: {f.rule}: {f.reason} ({f.cause}){counts}"))
    for note in explained.notes:
        changes.add(Text(note))
    console.print(tree, soft_wrap=False)
