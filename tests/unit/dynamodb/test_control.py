"""The control items' partition key values (:mod:`aggregator.dynamodb.control`): the manifest's
record of their number, the refusal of a layout that differs, and listings over every value."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.dynamodb.control import (
    ControlLayoutError,
    check_control_partitions,
    moving_control_partitions,
    query_control,
    recorded_control_partitions,
)

FOUR = TableLayout(control_partitions=4)
RULES = {"rules": {"M": {"likes": {"M": {}}}}}


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (None, None),  # no manifest: nothing recorded, no control items
        ({}, None),
        ({"genesis": {"M": {}}}, None),  # created by create-table before the record existed
        ({"rules": {"M": {}}}, None),  # every rule dropped, nothing recorded
        (RULES, 1),  # rules registered before the record existed
        ({**RULES, "control_partitions": {"N": "4"}}, 4),
        ({"control_partitions": {"N": "8"}}, 8),
    ],
)
def test_the_recorded_number(item: dict[str, Any] | None, expected: int | None) -> None:
    assert recorded_control_partitions(item) == expected


def test_a_layout_that_differs_is_refused_in_one_line() -> None:
    assert check_control_partitions({"control_partitions": {"N": "4"}}, FOUR, "t") == 4
    assert check_control_partitions(None, FOUR, "t") is None  # to be recorded
    with pytest.raises(ControlLayoutError) as raised:
        check_control_partitions(RULES, FOUR, "t")
    message = str(raised.value)
    assert isinstance(raised.value, ConfigError) and "\n" not in message
    assert message == (
        "table 't' keeps its control items (fences, routing items, top lists, backfill "
        "records) under 1 partition key value, but the definitions say control_partitions: 4; "
        "set control_partitions: 1 in their table: section (a table keeps the number its "
        "first rules were registered with), or move the items with the stream subscription "
        "stopped: aggregator move-control-items --subscription-stopped (docs: Table layout)"
    )


def test_every_layout_is_refused_while_the_items_move() -> None:
    item = {"control_partitions": {"N": "4"}, "control_partitions_moving": {"N": "2"}}
    assert moving_control_partitions(item) == 2
    assert moving_control_partitions(RULES) is None
    for layout in (FOUR, TableLayout(control_partitions=2)):
        with pytest.raises(ControlLayoutError, match="is moving its control items to 2"):
            check_control_partitions(item, layout, "t")


def test_a_listing_reads_every_value_and_keys_come_from_the_items() -> None:
    asked: list[str] = []

    def call(operation: str, **request: Any) -> dict[str, Any]:
        assert operation == "query" and request["ConsistentRead"] is True
        partition = request["ExpressionAttributeValues"][":pk"]["S"]
        assert request["ExpressionAttributeValues"][":prefix"] == {"S": "fence#"}
        asked.append(partition)
        return {"Items": [{"pk": {"S": partition}, "sk": {"S": f"fence#{len(asked)}"}}]}

    items = [i for page in query_control(call, "t", FOUR, begins_with="fence#") for i in page]
    assert asked == ["AGGREGATOR#CONTROL", *(f"AGGREGATOR#CONTROL#{n}" for n in range(4))]
    assert [FOUR.key_of(i)["pk"]["S"] for i in items] == asked
    asked.clear()
    list(query_control(call, "t", TableLayout(), begins_with="fence#"))
    assert asked == ["AGGREGATOR#CONTROL"]


def test_a_control_item_key_is_its_sort_keys_crc() -> None:
    sort_key = "leaderboard-top#board#3"
    n = zlib.crc32(sort_key.encode()) % 4
    assert FOUR.control_key(sort_key) == {
        "pk": {"S": f"AGGREGATOR#CONTROL#{n}"},
        "sk": {"S": sort_key},
    }
