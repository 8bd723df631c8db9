"""The distributed backfill's twin (:func:`run_backfill_twin`): a table adopted with items
already in it, on DynamoDB Local, with a stream of many shards (:class:`~aggregator.dev.shards.
ShardTwin`, rolling over), a stream handler on every shard that crashes now and then, an
application writing at a steady rate throughout, and a distributed backfill run as the state
machine runs it (:class:`~aggregator.dev.backfill_execution.LocalExecution`), each scan, join
and reduce invocation a separate process with a time budget, some killed at a random moment.
Every aggregate is then checked against a count of the table's items made without the engine.

What it models: Lambda invocations as processes (a fresh process each: memory is the
process's peak), their time budget (the task stops itself before it), their death at any
instant (``SIGKILL``), the state machine's loops and retries, the stream's shards and their
rollovers (the shard twin's model), a handler that crashes mid-batch and is delivered the batch
again. What it does not: Lambda's concurrency quota and cold-start latency, Step Functions'
own failures, network latency (DynamoDB Local answers in a millisecond), DynamoDB's throughput
limits (the scan is bounded by this machine's two cores, not by read capacity), and the
collector runs in this process (it reads the twin's shards, which live here), killed by an
exception instead of a signal.
"""

from __future__ import annotations

import multiprocessing
import random
import resource
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import yaml

from aggregator.core.rules import load_rules
from aggregator.dev.backfill_execution import LocalExecution
from aggregator.dev.faults import FaultInjectingClient, RunnerFaults, SimulatedCrash
from aggregator.dev.local import ACCESS_KEY, REGION, SECRET_KEY, DynamoDBLocal
from aggregator.dev.shards import EventSourceTwin, ShardPlan, ShardTwin, SimulatedClock
from aggregator.dynamodb.checkpoint import checkpoint_attribute
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.query import AggregateStore
from aggregator.dynamodb.streams import TableStream
from aggregator.operations.backfill.distributed import run_task
from aggregator.runtime.processor import create_processor

__all__ = ["RULES_YAML", "TwinResult", "TwinSettings", "run_backfill_twin"]

RULES_YAML = {
    "rules": [
        {
            "name": "likes_per_post",
            "match": {"SK": {"prefix": "LIKE#"}},
            "key": "{PK}",
        },
        {
            "name": "stars_per_post",
            "match": {"SK": {"prefix": "LIKE#"}, "stars": {"exists": True}},
            "key": "{PK}",
            "delta": {"attribute": "stars"},
        },
    ],
    "table": {"partition_key": "PK", "sort_key": "SK"},
}
"""The workload's rules: likes per post, and the stars the likes give (a delta that a write can
change without changing the count)."""
IN_PROCESS_TASKS = ("start", "collect", "scan_end", "finish")
OVERRUN_SECONDS = 5.0
"""How long past its budget an invocation may run (its process's start-up and exit) before the
twin kills it, as Lambda kills a function at its timeout."""
"""Tasks run in this process: the collector reads the twin's shards, which live here."""


@dataclass(frozen=True, slots=True)
class TwinSettings:
    """One run of the twin (defaults: the size ``make soak`` runs)."""

    posts: int = 2_000
    likes: int = 40_000
    """Items in the table before the rules are deployed (the backfill's work)."""
    partitions: int = 64
    """Stream shards open at once (one per simulated partition)."""
    rollover_seconds: float = 40.0
    segments: int = 256
    workers: int = 8
    join_buckets: int = 16
    reduce_buckets: int = 16
    budget_seconds: float = 6.0
    """Each invocation's time (Lambda's would be up to 900 s)."""
    kill_share: float = 0.25
    """Invocations killed at a random moment of their budget."""
    writes_per_second: float = 40.0
    """The application's steady rate, throughout."""
    crash_share: float = 0.05
    """Handler batches that crash (after a random number of their writes) and are retried."""
    stream_lag_seconds: float = 1.0
    page_items: int = 100
    carry_keys: int = 400
    flush_items: int = 300
    seed: int = 0


@dataclass(slots=True)
class TwinResult:
    """What a run measured."""

    settings: TwinSettings
    items_scanned: int = 0
    backfill_seconds: float = 0.0
    invocations: int = 0
    killed: int = 0
    worker_peak_mb: float = 0.0
    application_writes: int = 0
    changes: int = 0
    changed_items: int = 0
    shards: int = 0
    handler_crashes: int = 0
    overruns: int = 0
    """Invocations that outlived their budget by more than :data:`OVERRUN_SECONDS` (killed, as
    Lambda would: a task must stop itself in time)."""
    most_backfill_checkpoints: int = 0
    """The most checkpoint entries of the backfill's on one aggregate item (one per reduce
    bucket that wrote it: 1, however many segments counted it)."""
    wrong: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.wrong

    @property
    def items_per_second(self) -> float:
        return self.items_scanned / self.backfill_seconds if self.backfill_seconds else 0.0

    def line(self) -> str:
        """The ``backfill-scale:`` line."""
        return (
            f"backfill-scale: {self.settings.segments} segments, {self.settings.workers} "
            f"workers: {self.items_per_second:,.0f} items/s, worker peak memory "
            f"{self.worker_peak_mb:.0f} MB, exact {'yes' if self.exact else 'no'}"
        )


def _child(
    request: dict[str, Any],
    endpoint: str,
    table: str,
    arn: str,
    definitions: str,
    budget_seconds: float,
    send: Any,
) -> None:
    """One invocation in a process of its own (a Lambda invocation's stand-in)."""
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=REGION
    )
    client = session.client("dynamodb", endpoint_url=endpoint)
    rules = load_rules(Path(definitions))
    response = run_task(
        request,
        rules=rules,
        table=TableStream(client, None, table, arn),  # type: ignore[arg-type]
        remaining_seconds=budget_seconds,
    )
    send.send((response, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


class _CollectorKiller:
    """A streams client that, when armed, raises :class:`SimulatedCrash` at its n-th call."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.left: int | None = None
        self.kills = 0

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.left is not None:
                if self.left <= 0:
                    self.left = None
                    self.kills += 1
                    raise SimulatedCrash("collector killed")
                self.left -= 1
            return attribute(*args, **kwargs)

        return call


def _prefill(
    ddb: Any, table: str, settings: TwinSettings, rnd: random.Random
) -> dict[tuple[str, str], dict[str, Any]]:
    """The table (no stream yet: the application's items predate the framework) and its likes."""
    ddb.create_table(
        TableName=table,
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    items: dict[tuple[str, str], dict[str, Any]] = {}
    pending = []
    for n in range(settings.likes):
        item = _like(rnd, settings, n)
        items[(item["PK"]["S"], item["SK"]["S"])] = item
        pending.append({"PutRequest": {"Item": item}})
        if len(pending) == 25 or n == settings.likes - 1:
            while pending:
                response = ddb.batch_write_item(RequestItems={table: pending})
                pending = response.get("UnprocessedItems", {}).get(table, [])
    ddb.update_table(
        TableName=table,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    return items


def _like(rnd: random.Random, settings: TwinSettings, n: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "PK": {"S": f"POST#{rnd.randrange(settings.posts)}"},
        "SK": {"S": f"LIKE#{n}"},
    }
    if rnd.random() < 0.7:
        item["stars"] = {"N": str(rnd.randint(1, 5))}
    return item


def _truth(ddb: Any, table: str) -> dict[str, dict[str, Decimal]]:
    """Likes and stars per post, counted from a strongly consistent scan of the items (not
    through the engine)."""
    likes: Counter[str] = Counter()
    stars: Counter[str] = Counter()
    start = None
    while True:
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = ddb.scan(**kwargs)
        for item in page["Items"]:
            if item["SK"]["S"].startswith("LIKE#") and not item["PK"]["S"].startswith(
                ("AGGREGATES", "CONTROL", "DEAD")
            ):
                likes[item["PK"]["S"]] += 1
                if "stars" in item:
                    stars[item["PK"]["S"]] += int(item["stars"]["N"])
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    return {
        "likes_per_post": {k: Decimal(v) for k, v in likes.items() if v},
        "stars_per_post": {k: Decimal(v) for k, v in stars.items() if v},
    }


class _Twin:
    """One run's parts: the table, the shards and handlers, the application, the invocations."""

    def __init__(self, local: DynamoDBLocal, settings: TwinSettings, folder: Path) -> None:
        self.local = local
        self.settings = settings
        self.rnd = random.Random(settings.seed)
        self.kills = random.Random(settings.seed + 2)
        self.result = TwinResult(settings)
        self.ddb = local.client("dynamodb")
        self.table = f"twin-{settings.seed}-{int(time.time())}"
        self.definitions = folder / "rules.yaml"
        self.definitions.write_text(yaml.safe_dump(RULES_YAML))
        self.rules = load_rules(self.definitions)
        self.live = list(_prefill(self.ddb, self.table, settings, self.rnd))
        self.arn = self.ddb.describe_table(TableName=self.table)["Table"]["LatestStreamArn"]
        self.clock = SimulatedClock(time.time())
        self.twin = ShardTwin(
            local.client("dynamodbstreams"),
            self.arn,
            ShardPlan(settings.partitions, settings.rollover_seconds, self.clock.now),
            self.clock,
            layout=self.rules.layout,
        )
        self.clients = [
            FaultInjectingClient(self.ddb, layout=self.rules.layout)
            for _ in range(settings.partitions)
        ]
        self.crashes = random.Random(settings.seed + 1)
        self.source = EventSourceTwin(
            self.twin,
            self.processor_for,
            batch_size=100,
            tumbling_window_seconds=1,
            faults_for=self.faults_for,
            threads=4,
        )
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.killer = _CollectorKiller(self.twin.whole())
        self.stream_table = TableStream(self.ddb, cast(Any, self.killer), self.table, self.arn)
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(["aggregator.operations.backfill.distributed", "boto3"])

    # -- the stream handler ----------------------------------------------------------------------

    def processor_for(self, p: int) -> Any:
        client = cast(Any, self.clients[p])
        return create_processor(
            self.rules, client, self.table, clock=self.clock, lifecycle=True, max_workers=2
        )

    def faults_for(self, p: int) -> RunnerFaults:
        def crash(n: int) -> int | None:
            if self.crashes.random() < self.settings.crash_share:
                self.result.handler_crashes += 1
                return self.crashes.randint(0, 3)
            return None

        return RunnerFaults(client=self.clients[p], crash=crash)

    def stream(self) -> None:
        """The event source mapping, in real time: the twin's clock follows this machine's."""
        while not self.stop.is_set():
            self.clock.now = max(self.clock.now, time.time())
            self.source.run(until_seconds=self.clock.now + 0.05)
            time.sleep(0.02)

    # -- the application -----------------------------------------------------------------------

    def application(self) -> None:
        """Likes, changed stars and unlikes at a steady rate until stopped."""
        n = self.settings.likes
        interval = 1 / self.settings.writes_per_second
        rnd, ddb, table, live = self.rnd, self.ddb, self.table, self.live
        while not self.stop.is_set():
            roll = rnd.random()
            if roll < 0.3 and live:
                pk, sk = live.pop(rnd.randrange(len(live)))
                ddb.delete_item(TableName=table, Key={"PK": {"S": pk}, "SK": {"S": sk}})
            elif roll < 0.5 and live:
                pk, sk = live[rnd.randrange(len(live))]
                stars = {"N": str(rnd.randint(1, 5))}
                ddb.put_item(
                    TableName=table, Item={"PK": {"S": pk}, "SK": {"S": sk}, "stars": stars}
                )
            else:
                item = _like(rnd, self.settings, n)
                n += 1
                ddb.put_item(TableName=table, Item=item)
                live.append((item["PK"]["S"], item["SK"]["S"]))
            self.result.application_writes += 1
            time.sleep(interval)

    # -- invocations -----------------------------------------------------------------------------

    def invoke(self, request: dict[str, Any]) -> dict[str, Any]:
        """One invocation: in this process (:data:`IN_PROCESS_TASKS`), else in a process of its
        own; a share of them killed at a random moment of their budget."""
        settings = self.settings
        with self.lock:
            self.result.invocations += 1
            kill_at = (
                self.kills.uniform(0.1, 1.0) * settings.budget_seconds
                if self.kills.random() < settings.kill_share
                else None
            )
            calls = self.kills.randint(0, 200)
        if request["task"] in IN_PROCESS_TASKS:
            return self._in_process(request, calls if kill_at is not None else None)
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_child,
            args=(
                request,
                self.local.endpoint_url,
                self.table,
                self.arn,
                str(self.definitions),
                settings.budget_seconds,
                send,
            ),
        )
        process.start()
        send.close()
        process.join(kill_at if kill_at is not None else settings.budget_seconds + OVERRUN_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()
            with self.lock:
                self.result.killed += 1
                self.result.overruns += kill_at is None
            raise SimulatedCrash(f"{request['task']} killed")
        if not receive.poll():
            raise SimulatedCrash(f"{request['task']} failed (exit code {process.exitcode})")
        response, peak_kb = receive.recv()
        with self.lock:
            self.result.worker_peak_mb = max(self.result.worker_peak_mb, peak_kb / 1024)
        return cast(dict[str, Any], response)

    def _in_process(self, request: dict[str, Any], kill_after_calls: int | None) -> dict[str, Any]:
        """A task of this process; the collector killed at its ``kill_after_calls``-th read of
        the stream when given."""
        if request["task"] == "collect":
            self.killer.left = kill_after_calls
        try:
            return run_task(
                request,
                rules=self.rules,
                table=self.stream_table,
                remaining_seconds=self.settings.budget_seconds,
            )
        except SimulatedCrash:
            with self.lock:
                self.result.killed += 1
            raise
        finally:
            self.killer.left = None

    # -- the run ---------------------------------------------------------------------------------

    def wait_for_deployment(self) -> None:
        """Until the handler has met the rules (registered them, pending)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = Manifest(self.ddb, self.table, self.rules.layout).load()
            if states and all(s.status == "pending" for s in states.values()):
                return
            time.sleep(0.2)

    def run(self) -> TwinResult:
        settings, result = self.settings, self.result
        threads = [
            threading.Thread(target=self.application, daemon=True),
            threading.Thread(target=self.stream, daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            self.wait_for_deployment()
            began = time.monotonic()
            # the twin kills far more often than Lambda would (a quarter of the invocations):
            # a died one is retried until it lives, so that every path is exercised
            summary = LocalExecution(self.invoke, died_retries=1_000).run(
                {
                    "segments": settings.segments,
                    "join_buckets": settings.join_buckets,
                    "reduce_buckets": settings.reduce_buckets,
                    "workers": settings.workers,
                    "stream_lag_seconds": settings.stream_lag_seconds,
                    "page_items": settings.page_items,
                    "carry_keys": settings.carry_keys,
                    "flush_items": settings.flush_items,
                }
            )["summary"]
            result.backfill_seconds = time.monotonic() - began
        finally:
            self.stop.set()
            for thread in threads:
                thread.join()
        # the application has stopped: the handler catches up
        self.clock.now = max(self.clock.now, time.time())
        self.source.run()
        self.source.close()
        result.items_scanned = int(summary["items_scanned"])
        backfill_id = str(summary["backfill_id"])
        result.changes = int(summary["changes"])
        result.changed_items = int(summary["changed_items"])
        result.shards = self.twin.shards_opened()
        self.check()
        self.count_checkpoints(backfill_id)
        self.ddb.delete_table(TableName=self.table)
        return result

    def count_checkpoints(self, backfill_id: str) -> None:
        """The most checkpoints of the backfill's reduce tasks on one aggregate item."""
        names = {
            checkpoint_attribute(f"backfill.{backfill_id}.{b}")
            for b in range(self.settings.reduce_buckets)
        }
        start = None
        while True:
            kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
            if start:
                kwargs["ExclusiveStartKey"] = start
            page = self.ddb.scan(**kwargs)
            for item in page["Items"]:
                if self.rules.layout.is_aggregates_partition(item["PK"]["S"]):
                    found = len(names & set(item))
                    self.result.most_backfill_checkpoints = max(
                        self.result.most_backfill_checkpoints, found
                    )
            start = page.get("LastEvaluatedKey")
            if not start:
                return

    def check(self) -> None:
        """Every post's aggregates against :func:`_truth`."""
        truth = _truth(self.ddb, self.table)
        store = AggregateStore(self.ddb, self.table, self.rules)
        for rule_name, expected in truth.items():
            for post in (f"POST#{n}" for n in range(self.settings.posts)):
                stored = store.get(rule_name, (post,))
                value = Decimal(0) if stored is None else Decimal(stored.value)
                if value != expected.get(post, Decimal(0)):
                    self.result.wrong.append(f"{rule_name} {post}: {value} != {expected.get(post)}")


def run_backfill_twin(local: DynamoDBLocal, settings: TwinSettings | None = None) -> TwinResult:
    """Run the twin on ``local`` (a running DynamoDB Local) and check every aggregate against a
    count of the items made without the engine.

    Raises
    ------
    SimulatedCrash, ConfigError
        When the execution fails past its retries (the twin's figures then say nothing).
    """
    with tempfile.TemporaryDirectory() as folder:
        return _Twin(local, settings or TwinSettings(), Path(folder)).run()


def main() -> None:  # pragma: no cover - a manual check
    with DynamoDBLocal() as local:
        small = TwinSettings(posts=50, likes=2_000, partitions=8, segments=32, workers=4)
        print(run_backfill_twin(local, small).line())


if __name__ == "__main__":  # pragma: no cover
    main()
