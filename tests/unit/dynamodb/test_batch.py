"""The one BatchGetItem loop (aggregator.dynamodb.batch) against a stub sender, and the policy
each of its four callers states (no DynamoDB needed)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import ClientError

from aggregator.core.exceptions import AggregatorError, QueryError
from aggregator.core.layout import DEFAULT_LAYOUT
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb import batch
from aggregator.dynamodb.batch import (
    MAX_ROUNDS,
    UnprocessedKeysError,
    WhenUnprocessed,
    batch_get,
)
from aggregator.dynamodb.collections import batch_get_items
from aggregator.dynamodb.floors import IndexFloors, floor_sort_key
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.query.top import top_from_lists
from aggregator.dynamodb.top_list_items import TopLists, top_sort_key

TABLE = "t"
BACKOFFS = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]  # 0.05 s doubled, at most 1 s: 7 waits


def key(i: int) -> dict[str, Any]:
    return {"pk": {"S": f"k{i:03d}"}}


class Stub:
    """A sender (``call(operation, **request)``) and a client (``batch_get_item(**request)``)
    over ``items``; ``leave(round, keys)`` says which keys a response leaves unprocessed, and
    ``error`` is raised instead of any response."""

    def __init__(
        self,
        items: dict[str, dict[str, Any]],
        leave: Callable[[int, list[dict[str, Any]]], list[dict[str, Any]]] = lambda r, k: [],
        error: Exception | None = None,
    ) -> None:
        self.items = items
        self.leave = leave
        self.error = error
        self.requests: list[dict[str, Any]] = []

    def __call__(self, operation: str, **request: Any) -> dict[str, Any]:
        assert operation == "batch_get_item"
        return self.batch_get_item(**request)

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        (table, spec), *rest = request["RequestItems"].items()
        assert not rest
        keys = spec["Keys"]
        assert len(keys) <= 100
        assert len({str(k) for k in keys}) == len(keys)  # no key twice in a request
        left = self.leave(len(self.requests), keys)
        served = [k for k in keys if k not in left]
        found = [self.items[k["pk"]["S"]] for k in served if k["pk"]["S"] in self.items]
        response: dict[str, Any] = {"Responses": {table: found}, "UnprocessedKeys": {}}
        if left:
            response["UnprocessedKeys"] = {table: {**spec, "Keys": left}}
        if request.get("ReturnConsumedCapacity") == "TOTAL":
            response["ConsumedCapacity"] = [{"TableName": table, "CapacityUnits": 0.5}]
        return response


def items_of(numbers: range) -> dict[str, dict[str, Any]]:
    return {f"k{i:03d}": {**key(i), "value": {"N": str(i)}} for i in numbers}


def error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "BatchGetItem")


def test_more_than_100_keys_go_in_chunks_of_100_each_key_once():
    stub = Stub(items_of(range(0, 250, 2)))  # even keys exist, odd ones do not
    keys = [key(i) for i in range(250)] + [key(7), key(8)]  # repeats are read once
    waits: list[float] = []
    result = batch_get(
        stub,
        TABLE,
        keys,
        consistent=True,
        when_unprocessed=WhenUnprocessed.RAISE,
        sleep=waits.append,
    )
    sent = [r["RequestItems"][TABLE]["Keys"] for r in stub.requests]
    assert [len(s) for s in sent] == [100, 100, 50]
    assert [k for s in sent for k in s] == [key(i) for i in range(250)]
    assert all(r["RequestItems"][TABLE]["ConsistentRead"] is True for r in stub.requests)
    assert all("ReturnConsumedCapacity" not in r for r in stub.requests)
    assert sorted(int(i["value"]["N"]) for i in result.items) == list(range(0, 250, 2))
    assert result.unprocessed == []
    assert waits == []


def test_eventual_reads_and_consumed_capacity_on_request():
    stub = Stub(items_of(range(3)))
    batch_get(
        stub,
        TABLE,
        [key(0), key(1)],
        consistent=False,
        when_unprocessed=WhenUnprocessed.RETURN,
        return_consumed_capacity=True,
    )
    (request,) = stub.requests
    assert "ConsistentRead" not in request["RequestItems"][TABLE]
    assert request["ReturnConsumedCapacity"] == "TOTAL"


def test_unprocessed_keys_returned_once_are_sent_again_after_a_backoff():
    stub = Stub(items_of(range(150)), leave=lambda r, keys: keys[-10:] if r == 1 else [])
    waits: list[float] = []
    result = batch_get(
        stub,
        TABLE,
        [key(i) for i in range(150)],
        consistent=False,
        when_unprocessed=WhenUnprocessed.RAISE,
        sleep=waits.append,
    )
    sent = [r["RequestItems"][TABLE]["Keys"] for r in stub.requests]
    assert sent[1] == [key(i) for i in range(90, 100)]  # the first chunk's last 10, again
    assert [len(s) for s in sent] == [100, 10, 50]
    assert waits == [0.05]
    assert sorted(int(i["value"]["N"]) for i in result.items) == list(range(150))
    assert result.unprocessed == []


def never(first_chunk_only: bool = False):
    def leave(_: int, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if first_chunk_only and key(0) not in keys and keys[0]["pk"]["S"] >= "k100":
            return []
        return keys[:3]

    return leave


def test_never_processed_raise_policy_raises_the_project_error_with_the_keys():
    stub = Stub(items_of(range(150)), leave=never())
    waits: list[float] = []
    with pytest.raises(UnprocessedKeysError) as caught:
        batch_get(
            stub,
            TABLE,
            [key(i) for i in range(150)],
            consistent=True,
            when_unprocessed=WhenUnprocessed.RAISE,
            sleep=waits.append,
        )
    assert caught.value.unprocessed == [key(0), key(1), key(2)]
    assert caught.value.table_name == TABLE
    assert "3 key(s) unprocessed 8 times in a row" in str(caught.value)
    assert isinstance(caught.value, AggregatorError)
    assert isinstance(caught.value, RuntimeError)  # what batch_get_items raised before
    assert len(stub.requests) == MAX_ROUNDS == 8  # the second chunk is never sent
    assert waits == BACKOFFS


def test_never_processed_return_policy_goes_on_and_returns_the_keys():
    stub = Stub(items_of(range(150)), leave=never(first_chunk_only=True))
    waits: list[float] = []
    result = batch_get(
        stub,
        TABLE,
        [key(i) for i in range(150)],
        consistent=False,
        when_unprocessed=WhenUnprocessed.RETURN,
        sleep=waits.append,
    )
    assert result.unprocessed == [key(0), key(1), key(2)]
    assert sorted(int(i["value"]["N"]) for i in result.items) == list(range(3, 150))
    assert len(stub.requests) == MAX_ROUNDS + 1
    assert waits == BACKOFFS


@pytest.mark.parametrize(
    "code", ["ProvisionedThroughputExceededException", "AccessDeniedException"]
)
@pytest.mark.parametrize("policy", list(WhenUnprocessed))
def test_a_request_error_propagates_unchanged_without_retry(code, policy):
    # a throttling error has outlasted botocore's retries; an access denial is final
    failure = error(code)
    stub = Stub(items_of(range(5)), error=failure)
    waits: list[float] = []
    with pytest.raises(ClientError) as caught:
        batch_get(
            stub, TABLE, [key(0)], consistent=True, when_unprocessed=policy, sleep=waits.append
        )
    assert caught.value is failure
    assert len(stub.requests) == 1
    assert waits == []


@pytest.fixture
def no_waits(monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr(batch.time, "sleep", waits.append)
    return waits


# --- the four callers and their policies -------------------------------------------------


def test_collection_reader_raises_when_keys_stay_unprocessed(no_waits):
    stub = Stub(items_of(range(5)), leave=never())
    with pytest.raises(UnprocessedKeysError):
        batch_get_items(stub, TABLE, [key(0), key(1)], sleep=no_waits.append)
    assert no_waits == BACKOFFS


def test_collection_reader_answers_in_key_order_with_none_for_missing():
    stub = Stub(items_of(range(0, 10, 2)))
    found = batch_get_items(stub, TABLE, [key(4), key(3), key(4), key(0)])
    stored = items_of(range(5))
    assert found == [stored["k004"], None, stored["k004"], stored["k000"]]


def top_item(partition: str, entries: dict[str, int]) -> dict[str, Any]:
    return {
        **DEFAULT_LAYOUT.item_key(DEFAULT_LAYOUT.control_pk, top_sort_key(partition)),
        "partition": {"S": partition},
        "top": {"M": {k: {"N": str(v)} for k, v in entries.items()}},
        "v": {"N": "1"},
    }


class KeyedStub(Stub):
    """A stub whose items are found by their whole key (control partition items)."""

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        ((table, spec),) = request["RequestItems"].items()
        keys = spec["Keys"]
        left = self.leave(len(self.requests), keys)
        found = [self.items[str(k)] for k in keys if k not in left and str(k) in self.items]
        response: dict[str, Any] = {"Responses": {table: found}}
        if left:
            response["UnprocessedKeys"] = {table: {**spec, "Keys": left}}
        if request.get("ReturnConsumedCapacity") == "TOTAL":
            response["ConsumedCapacity"] = [{"TableName": table, "CapacityUnits": 0.5}]
        return response


def keyed(*items: dict[str, Any]) -> dict[str, dict[str, Any]]:
    lay = DEFAULT_LAYOUT
    return {str({n: i[n] for n in (lay.partition_key, lay.sort_key)}): i for i in items}


def test_top_lists_read_raises_the_project_error_when_keys_stay_unprocessed(no_waits):
    stub = KeyedStub(keyed(top_item("r", {"a": 3})), leave=never())
    lists = TopLists(stub, TABLE, DEFAULT_LAYOUT)  # type: ignore[arg-type]
    with pytest.raises(UnprocessedKeysError):
        lists.read(["r"])
    assert len(stub.requests) == MAX_ROUNDS


def test_top_lists_read_lets_a_request_error_through():
    stub = KeyedStub({}, error=error("AccessDeniedException"))
    with pytest.raises(ClientError):
        TopLists(stub, TABLE, DEFAULT_LAYOUT).read(["r"])  # type: ignore[arg-type]


def floor_item(partition: str, value: int) -> dict[str, Any]:
    lay = DEFAULT_LAYOUT
    return {
        **lay.item_key(lay.control_pk, floor_sort_key(partition)),
        lay.leaderboard_attribute: {"S": partition},
        lay.value_attribute: {"N": str(value)},
        "raised_at": {"N": "100"},
    }


def test_floors_left_unprocessed_or_refused_stay_unknown(no_waits):
    items = keyed(floor_item("a", 5), floor_item("b", 7))
    lay = DEFAULT_LAYOUT
    b_key = lay.item_key(lay.control_pk, floor_sort_key("b"))
    stub = KeyedStub(items, leave=lambda _, keys: [k for k in keys if k == b_key])
    floors = IndexFloors(stub, TABLE, lay, clock=lambda: 1000.0)  # type: ignore[arg-type]
    floors.load(["a", "b"])
    assert floors.get("a") == Decimal(5)
    assert floors.get("b") is None  # unknown: index everything
    assert no_waits == BACKOFFS
    refused = KeyedStub(items, error=error("AccessDeniedException"))
    floors = IndexFloors(refused, TABLE, lay, clock=lambda: 1000.0)  # type: ignore[arg-type]
    floors.load(["a", "b"])  # never fails the batch
    assert floors.get("a") is None and floors.get("b") is None


RULES = RuleSet.of(rule("r", key="{pk}", leaderboard=True))


def test_store_top_lists_fall_back_when_keys_stay_unprocessed(no_waits):
    stub = KeyedStub(keyed(top_item("r", {"a": 3, "b": 2})), leave=never())
    store = AggregateStore(stub, TABLE, RULES, generations={})  # type: ignore[arg-type]
    assert top_from_lists(store.reader, "r", "r", "", None, ["r"], 1) is None
    assert store.requests == MAX_ROUNDS  # each request counted by the store's sender
    assert store.read_units == Decimal("0.5") * MAX_ROUNDS
    served = KeyedStub(keyed(top_item("r", {"a": 3, "b": 2})))
    store = AggregateStore(served, TABLE, RULES, generations={})  # type: ignore[arg-type]
    (top,) = top_from_lists(store.reader, "r", "r", "", None, ["r"], 1) or []
    assert (top.key, top.value) == ("a", 3)
    assert (store.requests, store.read_units) == (1, Decimal("0.5"))


@pytest.mark.parametrize(
    "code", ["ProvisionedThroughputExceededException", "AccessDeniedException"]
)
def test_store_top_lists_turn_a_request_error_into_a_query_error(code):
    failure = error(code)
    stub = KeyedStub({}, error=failure)
    store = AggregateStore(stub, TABLE, RULES, generations={})  # type: ignore[arg-type]
    with pytest.raises(QueryError) as caught:
        top_from_lists(store.reader, "r", "r", "", None, ["r"], 1)
    assert caught.value.__cause__ is failure
