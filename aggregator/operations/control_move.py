"""Move a table's control items to another number of partition key values
(``aggregator move-control-items``; :mod:`aggregator.dynamodb.control`).

The table's manifest records how many partition key values its control items (fences, routing
items, top lists, leaderboard floors, backfill records) spread over, and every process refuses
definitions that say otherwise. This operation changes that number, for the definitions' new
``control_partitions``:

1. Refuse while a backfill runs (a rule or generation ``backfilling``: its process writes
   backfill records and fences where the old number puts them).
2. Mark the manifest ``control_partitions_moving`` (a conditional write: the record is still
   the old number). From then on every handler, runner and command that reads the manifest
   refuses to start, whatever its definitions say.
3. For every partition key value of the old number (``control_pk`` first), read its control
   items (one ``Query`` per 1 MB page) and move each one whose new value differs: ``PutItem``
   of the same attributes under the new key, then ``DeleteItem`` of the old one. The manifest
   stays under ``control_pk``.
4. Record the new number and remove the mark (conditional on the mark).

Each step is safe to repeat: a run stopped anywhere is finished by running it again with the
same definitions (the mark says where the items are going; an item already under its new value
is left alone, and a copy written before a stop is written again with the same attributes).

What is not checked: that no handler is running. Stop the stream subscription first (disable
the event source mapping, or stop ``aggregator run``) and wait for the invocations in flight: a
warm handler read the manifest when it started and would keep writing fences, routing switches
and top lists under the old values while they move (a routing switch or a fence written behind
the move is lost, and exactly-once with it). Records wait in the stream meanwhile (24 hours).

Costs: reading every control item once (1 RCU per 4 KB, strongly consistent) and, per moved
item, one write of its size and one delete (1 WCU per started 1 KB each); two manifest writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aggregator.core.exceptions import ConfigError
from aggregator.core.lifecycle import generation_of
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.collections import query_collection
from aggregator.dynamodb.control import (
    moving_control_partitions,
    recorded_control_partitions,
)
from aggregator.dynamodb.manifest import MANIFEST_SORT_KEY, Manifest, manifest_states

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ControlMove", "move_control_items"]


@dataclass(frozen=True, slots=True)
class ControlMove:
    """What :func:`move_control_items` did: ``outcome`` is ``moved`` (the items moved from
    ``source`` to ``target`` partition key values), ``unchanged`` (the table already has
    ``target``) or ``recorded`` (the table had no control items and no record: ``target``
    recorded); ``moved`` counts the items moved by this run."""

    outcome: str
    source: int | None
    target: int
    moved: int = 0


def move_control_items(
    rules: RuleSet,
    client: DynamoDBClient,
    table_name: str,
    *,
    on_moved: Callable[[int], None] | None = None,
) -> ControlMove:
    """Move ``table_name``'s control items to the partition key values of the definitions'
    ``control_partitions`` (``rules.layout``), or finish a move a stopped run began (module
    docstring).

    Parameters
    ----------
    rules
        The definitions, whose layout says the new number.
    client, table_name
        The table.
    on_moved
        Called with the number of items moved after each moved item.

    Returns
    -------
    ControlMove

    Raises
    ------
    ConfigError
        While a backfill runs, or when a move to another number is under way (the message
        says which number finishes it).
    aggregator.dynamodb.errors.AwsError
        When a request fails (run again to resume).
    """
    layout = rules.layout
    target = layout.control_partitions
    manifest = Manifest(client, table_name, layout, check_layout=False)
    item = manifest.item()
    moving = moving_control_partitions(item)
    recorded = recorded_control_partitions(item)
    if moving is None:
        if recorded is None:
            manifest.record_control_partitions(target)
            return ControlMove("recorded", None, target)
        if recorded == target:
            return ControlMove("unchanged", recorded, target)
        states = manifest_states(item).values()
        running = sorted({generation_of(s.name)[0] for s in states if s.status == "backfilling"})
        if running:
            raise ConfigError(
                f"table {table_name!r}: a backfill of {', '.join(running)} is running (or was "
                "stopped); let it finish (aggregator backfill, or rebuild) before moving the "
                "control items"
            )
        if not manifest.begin_control_move(recorded, target):
            raise ConfigError(
                f"table {table_name!r}: its manifest changed while the move began; run "
                "aggregator move-control-items again"
            )
    elif moving != target:
        raise ConfigError(
            f"table {table_name!r} is moving its control items to {moving} partition key "
            f"values, but the definitions say control_partitions: {target}; finish that move "
            f"with definitions that say control_partitions: {moving}, then move again"
        )
    source_count = recorded if recorded is not None else 1
    source = layout.model_copy(update={"control_partitions": source_count})
    requests = requests_of(client)
    moved = 0
    for partition in source.control_partition_values:
        for page in query_collection(requests.send, table_name, source, partition):
            for old in page:
                sort_key = source.sort_key_of(old)
                if sort_key is None or sort_key == MANIFEST_SORT_KEY:
                    continue
                new_key = layout.control_key(sort_key)
                old_key = source.key_of(old)
                if new_key == old_key:
                    continue
                requests.send("put_item", TableName=table_name, Item={**old, **new_key})
                requests.send("delete_item", TableName=table_name, Key=old_key)
                moved += 1
                if on_moved is not None:
                    on_moved(moved)
    manifest.finish_control_move(target)
    return ControlMove("moved", source_count, target, moved)
