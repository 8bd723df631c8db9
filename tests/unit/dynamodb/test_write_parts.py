"""The writers' parts on their own (no I/O): the cost model and its observer, index membership
against a floor, and the one request path's throttling retries. Expected sizes are counted by
hand from DynamoDB's item-size rules (attribute name bytes plus value bytes; a number takes 1
byte per two significant digits plus 1)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from botocore.exceptions import ClientError

from aggregator.core.engine import AggregateRef, CoalescedDelta
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.dynamodb.costs import CostModel, WriteObservation
from aggregator.dynamodb.errors import AwsRequestError
from aggregator.dynamodb.floors import IndexFloors
from aggregator.dynamodb.item_requests import ItemRequests
from aggregator.dynamodb.membership import IndexMembership
from aggregator.dynamodb.modes import WriterOptions, make_writer
from aggregator.dynamodb.updates import resolved
from aggregator.dynamodb.write_stats import WriteStats
from tests.fakes import Clock

D = Decimal
RULE = "r"
# the new item "r#a" holding 5, in the index (DEFAULT_LAYOUT's names), byte by byte: pk
# "AGGREGATES" 2 + 10, sk "r#a" 2 + 3, value 5 → 5 + 2, rule "r" 4 + 1, key "a" 3 + 1, lb "r" 2 + 1
NEW_ITEM_BYTES = 12 + 5 + 7 + 5 + 4 + 3
# its index entry: the table's key, the index's key (lb) and sort key (value)
INDEX_ENTRY_BYTES = 12 + 5 + 3 + 7


def delta(amount: int, *, leaderboard: bool = True, seq: str = "1") -> CoalescedDelta:
    return CoalescedDelta(
        AggregateRef(RULE, "a", "a"), D(amount), seq, [(seq, D(amount))], leaderboard=leaderboard
    )


# -- the cost model and its observer -----------------------------------------------------------


def test_a_new_items_write_and_its_index_entry_are_each_one_unit_and_observed() -> None:
    seen: list[WriteObservation] = []
    costs = CostModel(DEFAULT_LAYOUT, clock=lambda: 42.0, observer=seen.append)
    assert NEW_ITEM_BYTES == 36 and INDEX_ENTRY_BYTES == 27
    assert costs.units(delta(5)) == (2, 1)  # 1 WCU for the item, 1 for the new entry's put
    assert seen == [WriteObservation(42.0, "AGGREGATES", "r#a", 1, NEW_ITEM_BYTES, RULE, 1)]


def test_the_larger_of_the_sizes_before_and_after_is_charged() -> None:
    seen: list[WriteObservation] = []
    costs = CostModel(DEFAULT_LAYOUT, clock=lambda: 7.0, observer=seen.append)
    pad = "x" * 1070
    old = {
        "pk": {"S": "AGGREGATES"},
        "sk": {"S": "r#a"},
        "value": {"N": "3"},
        "lb": {"S": RULE},
        "pad": {"S": pad},
    }
    before = 12 + 5 + 7 + 3 + (3 + 1070)  # 1,100 bytes: 2 WCU
    after = before + 5 + 4  # the update adds rule and key; value 8 takes 2 bytes as 3 did
    # in the index already: the changed value deletes and puts its entry (2 x 1 WCU)
    assert costs.units(delta(5), old=old) == (2 + 2, 2)
    assert seen[-1] == WriteObservation(7.0, "AGGREGATES", "r#a", 2, after, RULE, 2)
    # a write whose condition failed: charged for the item as it is, no index change
    assert costs.units(delta(5), old=old, applied=False) == (2, 0)
    assert seen[-1] == WriteObservation(7.0, "AGGREGATES", "r#a", 2, before, None, 0)


def test_without_an_observer_the_units_are_the_same() -> None:
    assert CostModel(DEFAULT_LAYOUT).units(delta(5)) == (2, 1)
    assert CostModel(DEFAULT_LAYOUT).units(delta(5, leaderboard=False)) == (1, 0)


def test_the_writer_reports_its_cost_models_observer() -> None:
    def observer(observation: WriteObservation) -> None:
        return None

    writer = make_writer("exactly-once", object(), "t", observer=observer)  # type: ignore[arg-type]
    try:
        assert writer.observer is observer
        assert writer.parts.costs.observer is observer
    finally:
        writer.close()


# -- index membership against a floor ----------------------------------------------------------


class Updates:
    """Records ``UpdateItem`` requests; fails them by their condition when told to."""

    def __init__(self, fail: bool = False) -> None:
        self.requests: list[dict] = []
        self.fail = fail

    def update_item(self, **request):
        self.requests.append(request)
        if self.fail:
            raise ClientError({"Error": {"Code": "ConditionalCheckFailedException"}}, "UpdateItem")
        return {}


def membership(client: Updates, floor: int | None, raised_at: float = 0.0) -> IndexMembership:
    floors = IndexFloors(client, "t", DEFAULT_LAYOUT, clock=lambda: 1_000.0)  # type: ignore[arg-type]
    if floor is not None:
        floors._known[RULE] = (D(floor), raised_at, float("inf"))
    return IndexMembership(floors, ItemRequests(client, "t", DEFAULT_LAYOUT))  # type: ignore[arg-type]


def test_without_a_floor_every_update_sets_the_index_attribute() -> None:
    parts = membership(Updates(), floor=None)
    assert parts.floor(delta(1)) is None
    assert parts.action(delta(-100), None) == "set"
    assert parts.floor(delta(1, leaderboard=False)) is None


def test_the_guess_follows_the_value_seen_last() -> None:
    parts = membership(Updates(), floor=5)
    floor = parts.floor(delta(1))
    assert floor == 5
    assert parts.action(delta(3), floor) == "keep"  # unseen: taken for new, 3 < 5, not in
    assert parts.action(delta(6), floor) == "set"  # unseen, 6 >= 5
    parts.remember(delta(0), D(10), True)
    assert parts.action(delta(-4), floor) == "keep"  # 6 >= 5, in already
    assert parts.action(delta(-8), floor) == "remove"  # 2 < 5, and the floor has stood


def test_an_item_is_not_taken_out_before_its_floor_has_stood() -> None:
    parts = membership(Updates(), floor=5, raised_at=1_000.0 - 30)  # raised 30 s ago
    parts.remember(delta(0), D(10), True)
    assert parts.action(delta(-8), D(5)) == "keep"


def test_an_update_that_crosses_the_floor_puts_the_item_into_the_index() -> None:
    client = Updates()
    parts = membership(client, floor=5)
    stats = WriteStats()
    old = {"value": {"N": "4"}}  # 5 + 2 bytes: 1 WCU
    parts.after_update(delta(3), D(5), "keep", old, D(3), stats)
    (request,) = client.requests
    assert resolved(request)["SET"] == {"lb": {"S": RULE}}
    assert resolved(request)["CONDITION"] == "value >= {'N': '5'}"
    assert (stats.index_entries_added, stats.modelled_wcu, stats.modelled_index_wcu) == (1, 2, 2)
    assert stats.requests == 1
    assert parts.seen["r#a"] == (D(7), True)


def test_a_fix_whose_condition_failed_leaves_the_membership_as_it_was() -> None:
    parts = membership(Updates(fail=True), floor=5)
    stats = WriteStats()
    parts.after_update(delta(3), D(5), "keep", {"value": {"N": "4"}}, D(3), stats)
    assert (stats.index_entries_added, stats.modelled_wcu, stats.requests) == (0, 0, 1)
    assert parts.seen["r#a"] == (D(7), False)


def test_an_item_below_the_floor_is_taken_out() -> None:
    client = Updates()
    parts = membership(client, floor=5)
    stats = WriteStats()
    old = {"value": {"N": "6"}, "lb": {"S": RULE}}
    parts.after_update(delta(-4), D(5), "keep", old, D(-4), stats)
    (request,) = client.requests
    assert resolved(request)["REMOVE"] == ["lb"]
    assert resolved(request)["CONDITION"] == "value < {'N': '5'}"
    assert (stats.index_entries_removed, stats.modelled_wcu) == (1, 2)
    assert parts.seen["r#a"] == (D(2), False)


def test_a_new_entry_under_no_floor_needs_no_fix() -> None:
    client = Updates()
    parts = membership(client, floor=None)
    stats = WriteStats()
    parts.after_update(delta(3), None, "set", None, D(3), stats)
    assert client.requests == [] and stats == WriteStats()
    assert parts.seen["r#a"] == (D(3), True)


# -- the one request path ----------------------------------------------------------------------


class Throttled:
    def __init__(self, times: int) -> None:
        self.times = times
        self.calls = 0

    def update_item(self, **request):
        self.calls += 1
        if self.calls <= self.times:
            raise ClientError({"Error": {"Code": "ThrottlingException"}}, "UpdateItem")
        return {"ConsumedCapacity": {"CapacityUnits": 1.5}}


def throttled_requests(times: int) -> tuple[Throttled, ItemRequests]:
    """A client throttled ``times`` times, and a writer's requests over it (2 retries)."""
    options = WriterOptions(throttle_retries=2, backoff_seconds=0.0)
    client = Throttled(times)
    requests = ItemRequests(
        client,  # type: ignore[arg-type]
        "t",
        DEFAULT_LAYOUT,
        throttle_retries=options.throttle_retries,
        backoff_seconds=options.backoff_seconds,
    )
    return client, requests


def test_throttling_is_retried_and_counted_then_raised() -> None:
    client, requests = throttled_requests(times=2)
    stats = WriteStats()
    requests.call("update_item", {}, stats)
    assert (client.calls, stats.requests, stats.throttle_retries) == (3, 3, 2)
    assert stats.reported_wcu == D("1.5")
    client, requests = throttled_requests(times=3)
    stats = WriteStats()
    with pytest.raises(AwsRequestError) as raised:  # the project's error, still a ClientError
        requests.call("update_item", {}, stats)
    assert isinstance(raised.value, ClientError)
    assert raised.value.code == "ThrottlingException"
    assert (client.calls, stats.requests, stats.throttle_retries) == (3, 3, 2)


def test_writer_options_default_to_the_documented_values() -> None:
    assert WriterOptions() == WriterOptions(
        throttle_retries=3, backoff_seconds=0.05, checkpoint_retention_seconds=25 * 3600
    )


@pytest.mark.parametrize(
    ("mode", "retention_seconds", "built_mode", "needs_shard"),
    [
        # at-least-once keeps no checkpoints: empty value items keep the default retention
        ("at-least-once", 25 * 3600, "at-least-once", False),
        ("window", 60, "exactly-once", True),
    ],
)
def test_the_checkpoint_retention_reaches_the_modes_that_keep_checkpoints(
    mode, retention_seconds, built_mode, needs_shard
) -> None:
    writer = make_writer(
        mode,
        object(),  # type: ignore[arg-type]
        "t",
        options=WriterOptions(checkpoint_retention_seconds=60),
        clock=Clock(0.0),
    )
    try:
        assert writer.parts.expiry.retention_seconds == retention_seconds
        assert writer.mode == built_mode
        assert writer.aggregates.needs_shard is needs_shard
    finally:
        writer.close()


@pytest.mark.parametrize(
    "options",
    [
        {"throttle_retries": -1},
        {"backoff_seconds": -0.5},
        {"checkpoint_retention_seconds": 0},
    ],
)
def test_writer_options_refuse_values_no_writer_can_use(options) -> None:
    with pytest.raises(ConfigError, match=next(iter(options))):
        WriterOptions(**options)


def test_a_made_writer_is_a_writer_at_run_time() -> None:
    from aggregator.dynamodb.writer import Writer

    writer = make_writer("at-least-once", object(), "t")  # type: ignore[arg-type]
    try:
        assert isinstance(writer, Writer)
        assert not isinstance(object(), Writer)
    finally:
        writer.close()
