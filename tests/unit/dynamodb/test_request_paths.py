"""The one request path (aggregator.dynamodb.client): the request client itself, and for each
request path of the package a throttling error, an exhausted ``UnprocessedKeys`` (where the path
batch-gets) and an access-denied error, each checked against the one behaviour documented for
it. No DynamoDB needed: a fake boto3 client answers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from aggregator.cli.boundary import describe_error
from aggregator.core.engine import RecordFailure
from aggregator.core.exceptions import AggregatorError, QueryError, WriteError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb import batch
from aggregator.dynamodb.batch import MAX_ROUNDS, UnprocessedKeysError
from aggregator.dynamodb.client import Backoff, RequestClient, RequestCounts, requests_of
from aggregator.dynamodb.collections import batch_get_items, query_collection
from aggregator.dynamodb.deadletters import (
    DeadLetter,
    DeadLetterWriter,
    letter_states,
    list_dead_letters,
)
from aggregator.dynamodb.errors import (
    THROTTLING_ERRORS,
    AwsConnectionError,
    AwsError,
    AwsRequestError,
)
from aggregator.dynamodb.floors import IndexFloors
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.routing import ShardRouting
from aggregator.dynamodb.streams import get_records_page, list_shards
from aggregator.dynamodb.table import table_stream_arn
from aggregator.dynamodb.tablecheck import check_key_schema
from aggregator.dynamodb.top_list_items import TopLists
from aggregator.operations.backfill.control import ControlItems
from aggregator.operations.reconcile import reconcile
from aggregator.operations.status import table_status
from aggregator.operations.top_list_check import check_top_lists

TABLE = "t"
THROTTLED = "ProvisionedThroughputExceededException"
DENIED = "AccessDeniedException"
PK_ONLY = TableLayout(partition_key="id", sort_key=None)
RULES = RuleSet.of(rule("r", key="{pk}", leaderboard=True))
PK_ONLY_RULES = RuleSet.of(rule("r", key="{pk}"), layout=PK_ONLY)


def client_error(code: str, operation: str = "GetItem") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} here"}}, operation)


Answer = dict[str, Any] | BaseException | Callable[..., dict[str, Any]]


class FakeClient:
    """A boto3-like client: operation ``op`` answers ``answers[op]`` (a response, an exception
    to raise, or a function of the request), else ``default``; every call is recorded."""

    def __init__(self, default: Answer, **answers: Answer) -> None:
        self.default = default
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, operation: str) -> Callable[..., dict[str, Any]]:
        if operation.startswith("__"):
            raise AttributeError(operation)

        def call(**request: Any) -> dict[str, Any]:
            self.calls.append((operation, request))
            answer = self.answers.get(operation, self.default)
            if isinstance(answer, BaseException):
                raise answer
            if callable(answer):
                return answer(**request)
            return answer

        return call

    def operations(self) -> list[str]:
        return [operation for operation, _ in self.calls]


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(batch.time, "sleep", waits.append)
    return waits


# --- the request client ------------------------------------------------------------------


def test_counts_requests_and_read_and_write_units_and_a_callers_own_tally():
    fake = FakeClient(
        {},
        get_item={"Item": {}, "ConsumedCapacity": {"CapacityUnits": 0.5}},
        batch_get_item={"ConsumedCapacity": [{"CapacityUnits": 1.5}, {"CapacityUnits": 2}]},
        update_item={"ConsumedCapacity": {"CapacityUnits": 3.0}},
    )
    client = RequestClient(fake)
    tally = RequestCounts()
    client.send("get_item", TableName=TABLE)
    client.send("batch_get_item", RequestItems={})
    client.send("update_item", TableName=TABLE, counts=tally)
    client.send("query", TableName=TABLE)  # no ConsumedCapacity asked for: nothing counted
    assert client.counts.requests == 4
    assert client.counts.read_units == Decimal("4.0")  # 0.5 + 1.5 + 2
    assert client.counts.write_units == Decimal("3.0")
    assert (tally.requests, tally.read_units, tally.write_units) == (1, 0, Decimal("3.0"))
    assert fake.calls[2] == ("update_item", {"TableName": TABLE})  # counts is not sent


def test_throttling_is_retried_with_a_bounded_exponential_backoff_then_succeeds():
    answers = iter([client_error(THROTTLED)] * 6 + [{"Item": {"v": {"N": "1"}}}])

    def get_item(**_: Any) -> dict[str, Any]:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    waits: list[float] = []
    client = RequestClient(
        FakeClient({}, get_item=get_item),
        backoff=Backoff(retries=6, first=0.1, ceiling=1.0),
        sleep=waits.append,
    )
    tally = RequestCounts()
    assert client.send("get_item", TableName=TABLE, counts=tally) == {"Item": {"v": {"N": "1"}}}
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]  # doubled, never above the ceiling
    assert (client.counts.requests, client.counts.throttle_retries) == (7, 6)
    assert (tally.requests, tally.throttle_retries) == (7, 6)


@pytest.mark.parametrize("code", sorted(THROTTLING_ERRORS))
def test_throttling_past_the_retries_raises_the_project_error(code):
    failure = client_error(code)
    waits: list[float] = []
    client = RequestClient(FakeClient(failure), backoff=Backoff(retries=2), sleep=waits.append)
    with pytest.raises(AwsRequestError) as caught:
        client.send("get_item", TableName=TABLE)
    assert waits == [0.05, 0.1]
    assert client.counts.requests == 3
    assert caught.value.code == code
    assert caught.value.__cause__ is failure


def test_by_default_nothing_is_retried_on_top_of_botocore():
    fake = FakeClient(client_error(THROTTLED))
    with pytest.raises(AwsRequestError):
        RequestClient(fake).send("get_item", TableName=TABLE)
    assert fake.operations() == ["get_item"]


def test_other_errors_are_not_retried_and_keep_code_operation_and_cause():
    failure = client_error(DENIED, "Query")
    fake = FakeClient(failure)
    client = RequestClient(fake, backoff=Backoff(retries=3), sleep=lambda _: None)
    with pytest.raises(AwsRequestError) as caught:
        client.send("query", TableName=TABLE)
    error = caught.value
    assert fake.operations() == ["query"]
    assert (error.code, error.operation, error.operation_name) == (DENIED, "Query", "Query")
    assert error.__cause__ is failure
    assert error.response == failure.response
    assert str(error) == str(failure)
    assert isinstance(error, ClientError) and isinstance(error, AggregatorError)
    assert isinstance(error, AwsError)


def test_an_sdk_error_becomes_a_connection_error_naming_the_operation():
    failure = EndpointConnectionError(endpoint_url="http://localhost:1")
    with pytest.raises(AwsConnectionError) as caught:
        RequestClient(FakeClient(failure)).send("describe_table", TableName=TABLE)
    error = caught.value
    assert (error.code, error.operation) == ("EndpointConnectionError", "DescribeTable")
    assert error.__cause__ is failure
    assert str(error) == str(failure)
    assert isinstance(error, BotoCoreError) and isinstance(error, AggregatorError)


def test_counts_are_exact_from_many_threads():
    client = RequestClient(FakeClient({"ConsumedCapacity": {"CapacityUnits": 1}}))
    tally = RequestCounts()

    def work() -> None:
        for _ in range(200):
            client.send("update_item", counts=tally)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (client.counts.requests, client.counts.write_units) == (1600, Decimal(1600))
    assert tally.requests == 1600


def test_requests_of_keeps_a_request_client_and_wraps_a_boto3_client():
    client = RequestClient(FakeClient({}))
    assert requests_of(client) is client
    assert requests_of(client.client).client is client.client


@pytest.mark.parametrize(
    "failure",
    [
        client_error(DENIED),
        client_error(THROTTLED),
        client_error("ResourceNotFoundException"),
        EndpointConnectionError(endpoint_url="http://localhost:8000"),
    ],
    ids=str,
)
def test_the_cli_line_of_a_wrapped_error_is_the_line_of_botocores(failure):
    try:
        RequestClient(FakeClient(failure)).send("get_item", TableName=TABLE)
    except AwsError as wrapped:
        meta = {"aggregator.table": TABLE}
        assert describe_error(wrapped, meta) == describe_error(failure, meta)
        outer = QueryError("reading failed")
        outer.__cause__ = wrapped
        assert describe_error(outer, meta) == describe_error(failure, meta)
    else:  # pragma: no cover - the send above always raises
        pytest.fail("no error")


# --- each request path -------------------------------------------------------------------


def never_processed(**request: Any) -> dict[str, Any]:
    """A ``BatchGetItem`` that leaves every key unprocessed."""
    ((table, spec),) = request["RequestItems"].items()
    return {"Responses": {table: []}, "UnprocessedKeys": {table: spec}}


def keys_page(**request: Any) -> dict[str, Any]:
    """A page of one key of the collection index (pk-only tables) or of one item."""
    return {"Items": [{"id": {"S": "AGGREGATES#r#a"}, "pk": {"S": "AGGREGATES"}}]}


def letter(image: str | None = "bad") -> DeadLetter:
    return DeadLetter(
        sort_key="shard#1#r",
        shard_id="shard",
        sequence_number="1",
        rule="r",
        reason="why",
        failed_at="2024-01-01T00:00:00+00:00",
        record={"dynamodb": {"Keys": {"pk": {"S": "a"}, "sk": {"S": "b"}}}},
        cause="invalid-value",
        record_form="json",
        record_sha256="",
        record_bytes=0,
        replayable=False,
        image=image,
    )


def failure_of_a_record() -> RecordFailure:
    return RecordFailure(
        sequence_number="1", event_id="e", rule="r", reason="bad", record={"eventName": "INSERT"}
    )


def store_get(fake: FakeClient) -> Any:
    return AggregateStore(fake, TABLE, RULES, generations={}).get("r", "a")  # type: ignore[arg-type]


def store_list_pk_only(fake: FakeClient) -> Any:
    store = AggregateStore(fake, TABLE, PK_ONLY_RULES, generations={})  # type: ignore[arg-type]
    return list(store.list("r"))


def collection_read(fake: FakeClient) -> Any:
    return list(query_collection(requests_of(fake).send, TABLE, PK_ONLY, "AGGREGATES"))


def collection_batch_get(fake: FakeClient) -> Any:
    return batch_get_items(requests_of(fake).send, TABLE, [{"id": {"S": "x"}}])


def floors_load(fake: FakeClient) -> Any:
    floors = IndexFloors(fake, TABLE, DEFAULT_LAYOUT, clock=lambda: 1000.0)  # type: ignore[arg-type]
    floors.load(["a"])
    return floors.get("a")


def top_lists_read(fake: FakeClient) -> Any:
    return TopLists(fake, TABLE, DEFAULT_LAYOUT).read(["r"])  # type: ignore[arg-type]


def stream_page(fake: FakeClient) -> Any:
    return get_records_page(fake, "arn", "shard", "iterator")  # type: ignore[arg-type]


def stream_shards(fake: FakeClient) -> Any:
    return list_shards(fake, "arn")  # type: ignore[arg-type]


def dead_letter_list(fake: FakeClient) -> Any:
    return list(list_dead_letters(fake, TABLE))  # type: ignore[arg-type]


def dead_letter_states(fake: FakeClient) -> Any:
    return letter_states(fake, TABLE, [letter()], RULES)  # type: ignore[arg-type]


def dead_letter_write(fake: FakeClient) -> Any:
    return DeadLetterWriter(fake, TABLE).write([failure_of_a_record()])  # type: ignore[arg-type]


def manifest_load(fake: FakeClient) -> Any:
    return Manifest(fake, TABLE, DEFAULT_LAYOUT).load()  # type: ignore[arg-type]


def reconcile_rules(fake: FakeClient) -> Any:
    return reconcile(RULES, fake, TABLE, settle_seconds=0)  # type: ignore[arg-type]


def status_of_table(fake: FakeClient) -> Any:
    return table_status(RULES, fake, TABLE)  # type: ignore[arg-type]


def key_schema_check(fake: FakeClient) -> Any:
    return check_key_schema(fake, TABLE, DEFAULT_LAYOUT)  # type: ignore[arg-type]


def routing_read(fake: FakeClient) -> Any:
    return ShardRouting(fake, TABLE, DEFAULT_LAYOUT, ["r"]).read("shard")  # type: ignore[arg-type]


def stream_arn(fake: FakeClient) -> Any:
    return table_stream_arn(fake, TABLE)  # type: ignore[arg-type]


def top_lists_check(fake: FakeClient) -> Any:
    rules = RuleSet.of(rule("r", key="{pk}", leaderboard=True, leaderboard_store="list"))
    return check_top_lists(fake, TABLE, rules, ["r"])  # type: ignore[arg-type]


def backfill_control(fake: FakeClient) -> Any:
    return ControlItems(fake, TABLE, DEFAULT_LAYOUT, lambda: 0.0).get("backfill#b#meta")  # type: ignore[arg-type]


def backfill_lease(fake: FakeClient) -> Any:
    return ControlItems(fake, TABLE, DEFAULT_LAYOUT, lambda: 0.0).take_lease("b")  # type: ignore[arg-type]


PATHS: dict[str, tuple[Callable[[FakeClient], Any], type[Exception]]] = {
    # path: (call, the error a failed request raises there)
    "query get": (store_get, QueryError),
    "query list (pk-only)": (store_list_pk_only, QueryError),
    "collection read": (collection_read, AwsRequestError),
    "collection batch get": (collection_batch_get, AwsRequestError),
    "top lists": (top_lists_read, AwsRequestError),
    "stream records": (stream_page, AwsRequestError),
    "stream shards": (stream_shards, AwsRequestError),
    "dead letters list": (dead_letter_list, AwsRequestError),
    "dead letter states": (dead_letter_states, AwsRequestError),
    "dead letter write": (dead_letter_write, WriteError),
    "manifest": (manifest_load, AwsRequestError),
    "reconcile": (reconcile_rules, AwsRequestError),
    "status": (status_of_table, AwsRequestError),
    "table check": (key_schema_check, AwsRequestError),
    "table stream": (stream_arn, AwsRequestError),
    "routing": (routing_read, AwsRequestError),
    "top lists check": (top_lists_check, AwsRequestError),
    "backfill control item": (backfill_control, AwsRequestError),
    "backfill lease": (backfill_lease, AwsRequestError),
}


def aws_cause(error: BaseException) -> AwsRequestError | None:
    current: BaseException | None = error
    while current is not None and not isinstance(current, AwsRequestError):
        current = current.__cause__
    return current


@pytest.mark.parametrize("code", [THROTTLED, DENIED])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_failed_request_raises_the_project_error_with_the_code_and_cause(path, code):
    # a throttling error has outlasted botocore's own retries (readers add none); an access
    # denial is final: both raise the path's documented project error, never botocore's
    call, raised = PATHS[path]
    failure = client_error(code)
    fake = FakeClient(failure)
    with pytest.raises(raised) as caught:
        call(fake)
    assert len(fake.calls) == 1  # not retried on top of botocore
    assert isinstance(caught.value, AggregatorError)
    wrapped = aws_cause(caught.value)
    if wrapped is None:  # the query layer chains botocore's error itself (as before)
        assert caught.value.__cause__ is failure
    else:
        assert wrapped.code == code
        assert wrapped.__cause__ is failure


def test_floors_never_fail_a_batch_on_a_failed_request():
    # documented: floors that cannot be read stay unknown (the writer indexes everything)
    for code in (THROTTLED, DENIED):
        assert floors_load(FakeClient(client_error(code))) is None


EXHAUSTED: dict[str, tuple[Callable[[FakeClient], Any], Any]] = {
    # path: (call, what keys left unprocessed MAX_ROUNDS times come to)
    "collection read": (collection_read, UnprocessedKeysError),
    "collection batch get": (collection_batch_get, UnprocessedKeysError),
    "query list (pk-only)": (store_list_pk_only, QueryError),
    "top lists": (top_lists_read, UnprocessedKeysError),
    "dead letter states": (dead_letter_states, UnprocessedKeysError),
    "floors": (floors_load, None),  # unknown: the writer indexes everything
}


@pytest.mark.parametrize("path", sorted(EXHAUSTED))
def test_keys_left_unprocessed_come_to_what_the_path_states(path, no_waits):
    call, outcome = EXHAUSTED[path]
    fake = FakeClient({}, query=keys_page, batch_get_item=never_processed)
    if outcome is None:
        assert call(fake) is None
    else:
        with pytest.raises(outcome) as caught:
            call(fake)
        assert isinstance(caught.value, AggregatorError)
    assert fake.operations().count("batch_get_item") == MAX_ROUNDS
    assert no_waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
