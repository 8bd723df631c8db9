"""The control items spread over partition key values (issue 32), and the table's record of how
many values they use.

Control items (fences, routing items, top lists, leaderboard floors, backfill records; not the
manifest) live under :meth:`~aggregator.core.layout.TableLayout.control_key` of their sort key:
``control_pk`` when the layout's ``control_partitions`` is 1, else ``"<control_pk>#<n>"`` with
``n`` the CRC-32 of the sort key modulo ``control_partitions``. A read of one item is one
request wherever it lives; a listing (``status``, ``drop-rule``, the top-list check) reads every
value of :attr:`~aggregator.core.layout.TableLayout.control_partition_values`, one ``Query``
each (:func:`query_control`).

The manifest (always under ``control_pk``) records the number in its ``control_partitions``
attribute, so that no process looks for a control item under the wrong value: the first
registration of rules on a table (or ``create-table``) writes the layout's number, on condition
that none is recorded; a manifest that lists rules but records no number (written before the
record existed) means 1. Every read of the manifest through
:class:`~aggregator.dynamodb.manifest.Manifest` and the readers' cache of serving generations
compares the record with the layout and refuses a difference (:func:`check_control_partitions`).

The number changes only through ``aggregator move-control-items``
(:mod:`aggregator.operations.control_move`), with the stream subscription stopped: it marks the
manifest (``control_partitions_moving``, the new number: every process refuses to start while
it is there), moves each control item to its new value, then records the new number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.dynamodb.collections import CollectionPage, query_collection

__all__ = [
    "CONTROL_MOVE_ATTRIBUTE",
    "CONTROL_PARTITIONS_ATTRIBUTE",
    "ControlLayoutError",
    "check_control_partitions",
    "moving_control_partitions",
    "query_control",
    "recorded_control_partitions",
]

CONTROL_PARTITIONS_ATTRIBUTE = "control_partitions"
"""The manifest item's attribute (N) recording how many partition key values the table's control
items spread over."""

CONTROL_MOVE_ATTRIBUTE = "control_partitions_moving"
"""The manifest item's attribute (N) present while the control items move to that many partition
key values (``aggregator move-control-items``)."""


class ControlLayoutError(ConfigError):
    """The definitions' ``control_partitions`` differs from the number the table's manifest
    records: the control items would be looked for under the wrong partition key values."""


def recorded_control_partitions(item: Mapping[str, Any] | None) -> int | None:
    """The number of partition key values a manifest item (DynamoDB JSON) says the control items
    use: its ``control_partitions`` attribute; 1 for a manifest that lists rules without it
    (written before the record existed); ``None`` when nothing is recorded and no rule is listed
    (a table without control items yet: the layout's number is the one to record).

    Examples
    --------
    >>> recorded_control_partitions({"control_partitions": {"N": "4"}})
    4
    >>> recorded_control_partitions({"rules": {"M": {"likes": {"M": {}}}}})
    1
    >>> recorded_control_partitions(None) is None
    True
    """
    if not item:
        return None
    value = item.get(CONTROL_PARTITIONS_ATTRIBUTE, {}).get("N")
    if value is not None:
        return int(value)
    return 1 if item.get("rules", {}).get("M") else None


def moving_control_partitions(item: Mapping[str, Any] | None) -> int | None:
    """The number of partition key values a manifest item (DynamoDB JSON) says the control items
    are moving to (``aggregator move-control-items`` under way), else ``None``."""
    value = (item or {}).get(CONTROL_MOVE_ATTRIBUTE, {}).get("N")
    return None if value is None else int(value)


def check_control_partitions(
    item: Mapping[str, Any] | None, layout: TableLayout, table_name: str
) -> int | None:
    """Refuse a layout whose ``control_partitions`` differs from the manifest item's record
    (:func:`recorded_control_partitions`), and any layout while the control items move; returns
    the record (``None``: none yet).

    Raises
    ------
    ControlLayoutError
        A :class:`~aggregator.core.exceptions.ConfigError` with one line: what the table has,
        what the definitions say, how to proceed.
    """
    moving = moving_control_partitions(item)
    if moving is not None:
        raise ControlLayoutError(
            f"table {table_name!r} is moving its control items to {_values(moving)} "
            "(aggregator move-control-items was stopped before it finished); run it again with "
            f"definitions that say control_partitions: {moving} to finish the move"
        )
    recorded = recorded_control_partitions(item)
    if recorded is None or recorded == layout.control_partitions:
        return recorded
    raise ControlLayoutError(
        f"table {table_name!r} keeps its control items (fences, routing items, top lists, "
        f"backfill records) under {_values(recorded)}, but the definitions say "
        f"control_partitions: {layout.control_partitions}; set control_partitions: {recorded} "
        "in their table: section (a table keeps the number its first rules were registered "
        "with), or move the items with the stream subscription stopped: aggregator "
        "move-control-items --subscription-stopped (docs: Table layout)"
    )


def _values(n: int) -> str:
    return "1 partition key value" if n == 1 else f"{n} partition key values"


def query_control(
    call: Callable[..., dict[str, Any]],
    table_name: str,
    layout: TableLayout,
    *,
    begins_with: str,
) -> Iterator[CollectionPage]:
    """Pages of the control items whose sort key text begins with ``begins_with``, from every
    partition key value control items live under (one ``Query`` per value and 1 MB page:
    :func:`~aggregator.dynamodb.collections.query_collection`); in sort key order within a
    value, not across values.

    Raises
    ------
    Whatever ``call`` raises.
    """
    for partition in layout.control_partition_values:
        yield from query_collection(call, table_name, layout, partition, begins_with=begins_with)
