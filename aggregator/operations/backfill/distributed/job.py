"""A distributed backfill as its tasks see it (:class:`Job`): its settings (the meta item), the
rules it counts, and the control items its tasks write and read, with the commit that makes a
killed task's writes harmless (:class:`Progress`, :meth:`Job.commit`)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from aggregator.core.clock import Clock
from aggregator.core.deltas import AggregateRef, Amounts
from aggregator.core.engine import Engine
from aggregator.core.exceptions import ConfigError
from aggregator.core.lifecycle import resolved_rules
from aggregator.core.records import Image
from aggregator.core.rules import RuleSet
from aggregator.dynamodb.batch import WhenUnprocessed, batch_get, client_call
from aggregator.dynamodb.client import requests_of
from aggregator.dynamodb.errors import error_code
from aggregator.dynamodb.manifest import Manifest
from aggregator.dynamodb.streams import TableStream
from aggregator.dynamodb.updates import Update, with_collection

__all__ = ["CONTROL_TTL_SECONDS", "MAX_RECORD_BYTES", "Job", "Progress", "Settings", "new_attempt"]

CONTROL_TTL_SECONDS = 30 * 24 * 3600
"""A distributed backfill's control items (data records, progress, figures) expire 30 days after
their last write (on a table whose TTL is on the layout's ``ttl_attribute``: ``aggregator
prepare-table`` turns it on), long after the backfill ends: the data records are large (a few
dozen bytes for each item scanned), and nothing else deletes them."""
MAX_RECORD_BYTES = 350 * 1024
"""The largest data record a task writes (its blob); more is split into chunks. DynamoDB items
are at most 400 KB (Developer Guide, "Service, account, and table quotas")."""


def new_attempt() -> str:
    """A fresh attempt id (8 hex digits): the data records of one invocation's flushes."""
    return uuid.uuid4().hex[:8]


@dataclass(frozen=True, slots=True)
class Settings:
    """What the ``start`` task fixed for the whole backfill (the meta item).

    Attributes
    ----------
    backfill_id
        12 hex digits.
    rules
        Storage names of the base rules counted; ``carried``: derived rules riding along.
    segments, join_buckets, reduce_buckets
        ``TotalSegments`` of the scan; hash buckets of item digests (join tasks) and of
        aggregates (reduce tasks).
    workers
        Scan tasks at once (the state machine's ``MaxConcurrency``); ``max_rcu`` (RCU/s, or
        ``None``) is shared by them: each scans at ``max_rcu / workers``.
    stream_lag_seconds
        How long a write may take to become readable from the stream.
    page_items, carry_keys, flush_items
        ``Scan`` page ``Limit``; a scan flushes once its carry holds ``carry_keys`` aggregates
        or ``flush_items`` item entries (memory bounds); a reducer applies at most
        ``carry_keys`` aggregates at a time.
    """

    backfill_id: str
    rules: tuple[str, ...]
    carried: tuple[str, ...]
    segments: int
    join_buckets: int
    reduce_buckets: int
    workers: int
    max_rcu: float | None
    stream_lag_seconds: float
    page_items: int
    carry_keys: int
    flush_items: int

    def to_item(self) -> dict[str, Any]:
        """The meta item's attributes (DynamoDB JSON)."""
        data = {
            "rules": list(self.rules),
            "carried": list(self.carried),
            "segments": self.segments,
            "join_buckets": self.join_buckets,
            "reduce_buckets": self.reduce_buckets,
            "workers": self.workers,
            "max_rcu": self.max_rcu,
            "stream_lag_seconds": self.stream_lag_seconds,
            "page_items": self.page_items,
            "carry_keys": self.carry_keys,
            "flush_items": self.flush_items,
        }
        return {
            "mode": {"S": "distributed"},
            "rules": {"SS": sorted({*self.rules, *self.carried})},
            "segments": {"N": str(self.segments)},
            "settings": {"S": json.dumps(data, sort_keys=True)},
        }

    @classmethod
    def from_item(cls, backfill_id: str, item: Mapping[str, Any]) -> Settings:
        """The settings a meta item holds.

        Raises
        ------
        ConfigError
            When the item is not a distributed backfill's.
        """
        if item.get("mode", {}).get("S") != "distributed":
            raise ConfigError(
                f"backfill {backfill_id} runs in one process (aggregator backfill); resume it "
                "there, or let it finish, before starting one on AWS"
            )
        data = json.loads(item["settings"]["S"])
        return cls(
            backfill_id=backfill_id,
            rules=tuple(data["rules"]),
            carried=tuple(data["carried"]),
            segments=int(data["segments"]),
            join_buckets=int(data["join_buckets"]),
            reduce_buckets=int(data["reduce_buckets"]),
            workers=int(data["workers"]),
            max_rcu=data["max_rcu"],
            stream_lag_seconds=float(data["stream_lag_seconds"]),
            page_items=int(data["page_items"]),
            carry_keys=int(data["carry_keys"]),
            flush_items=int(data["flush_items"]),
        )


@dataclass(slots=True)
class Progress:
    """A writer's progress item: the attempt of each committed flush, in order (its data
    records are those of that attempt); its own ``state`` (a scan's next key and figures, the
    collector's shard positions); whether it is ``done``; how many commits it has had (the
    condition of the next)."""

    attempts: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    commits: int = 0

    @classmethod
    def from_item(cls, item: Mapping[str, Any] | None) -> Progress:
        if not item:
            return cls()
        text = item["attempts"]["S"]
        return cls(
            text.split(",") if text else [],
            json.loads(item["state"]["S"]),
            bool(item.get("done", {}).get("BOOL", False)),
            int(item["commits"]["N"]),
        )


class Job:
    """One distributed backfill, loaded from its meta item, with what every task needs.

    Parameters
    ----------
    rules
        The deployed rule set (the function's definitions).
    table
        The table and its stream.
    backfill_id
        The backfill (``start`` made it).
    clock
        Epoch seconds.

    Raises
    ------
    ConfigError
        When there is no such backfill, or it is not a distributed one.
    """

    def __init__(
        self, rules: RuleSet, table: TableStream, backfill_id: str, *, clock: Clock = time.time
    ) -> None:
        self.table = table
        self.table_name = table.table_name
        self.layout = rules.layout
        self.requests = requests_of(table.client)
        self.clock = clock
        self.backfill_id = backfill_id
        meta = self.get(self.key("meta"))
        if meta is None:
            raise ConfigError(f"no backfill {backfill_id} in table {self.table_name}")
        self.settings = Settings.from_item(backfill_id, meta)
        self.manifest = Manifest(table.client, self.table_name, self.layout)
        self.rules = resolved_rules(rules, self.manifest.load())
        self.engine = Engine(self.rules)
        self.evaluation_failures = 0

    # -- control items -------------------------------------------------------------------------

    def key(self, *parts: object) -> str:
        """The sort key text ``backfill#<id>#<part>#...`` of one of this backfill's items."""
        return "#".join(["backfill", self.backfill_id, *(str(p) for p in parts)])

    def get(self, sort_key: str) -> dict[str, Any] | None:
        """A control item (strongly consistent), or ``None``."""
        item: dict[str, Any] | None = self.requests.send(
            "get_item",
            TableName=self.table_name,
            Key=self.layout.control_key(sort_key),
            ConsistentRead=True,
        ).get("Item")
        return item

    def get_many(self, sort_keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Control items by sort key text (``BatchGetItem``, strongly consistent); absent ones
        are missing from the result.

        Raises
        ------
        aggregator.dynamodb.batch.UnprocessedKeysError
            When DynamoDB keeps leaving keys unread.
        """
        by_key = {json.dumps(self.layout.control_key(k), sort_keys=True): k for k in sort_keys}
        result = batch_get(
            client_call(self.requests),
            self.table_name,
            [self.layout.control_key(k) for k in sort_keys],
            consistent=True,
            when_unprocessed=WhenUnprocessed.RAISE,
        )
        found: dict[str, dict[str, Any]] = {}
        for item in result.items:
            ident = json.dumps(self.layout.key_of(item), sort_keys=True)
            found[by_key[ident]] = item
        return found

    def put(self, sort_key: str, attributes: Mapping[str, Any]) -> None:
        """Write a control item with ``attributes`` (DynamoDB JSON)."""
        fields = self.layout.control_fields(sort_key)
        item = {**{k: {"S": v} for k, v in fields.items()}, **attributes, **self._expiry()}
        self.requests.send("put_item", TableName=self.table_name, Item=item)

    def put_if_version(self, sort_key: str, attributes: Mapping[str, Any], version: int) -> bool:
        """Write a control item whose ``version`` attribute is ``version`` (or which does not
        exist, for 0) with ``attributes`` and ``version + 1``; returns whether it was so."""
        fields = self.layout.control_fields(sort_key)
        item = {
            **{k: {"S": v} for k, v in fields.items()},
            **attributes,
            "version": {"N": str(version + 1)},
            **self._expiry(),
        }
        condition = "attribute_not_exists(#v)" if version == 0 else "#v = :v"
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": item,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#v": "version"},
        }
        if version:
            request["ExpressionAttributeValues"] = {":v": {"N": str(version)}}
        try:
            self.requests.send("put_item", **request)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def _expiry(self) -> dict[str, Any]:
        """The TTL attribute of the backfill's items: :data:`CONTROL_TTL_SECONDS` from now
        (DynamoDB deletes them then, if the table's TTL is on that attribute)."""
        return {self.layout.ttl_attribute: {"N": str(int(self.clock()) + CONTROL_TTL_SECONDS)}}

    def put_records(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Write control items (``{sort key text: attributes}``), a few at a time."""
        if not records:
            return
        with ThreadPoolExecutor(max_workers=min(8, len(records))) as pool:
            for future in [pool.submit(self.put, k, a) for k, a in records.items()]:
                future.result()

    def blobs(self, sort_keys: Sequence[str]) -> Iterable[tuple[str, bytes]]:
        """The blobs of data records, in the order of ``sort_keys``, read 100 at a time.

        Raises
        ------
        ConfigError
            When a committed record is missing (the table lost it).
        """
        for offset in range(0, len(sort_keys), 100):
            chunk = list(sort_keys[offset : offset + 100])
            found = self.get_many(chunk)
            for key in chunk:
                if key not in found:
                    raise ConfigError(f"backfill {self.backfill_id}: record {key} is missing")
                yield key, found[key]["data"]["B"]

    # -- writers' progress and commits ---------------------------------------------------------

    def progress(self, writer: str) -> Progress:
        """A writer's committed progress (``s<segment>``, ``c``, ``j<bucket>``)."""
        return Progress.from_item(self.get(self.key("progress", writer)))

    def progresses(self, writers: Sequence[str]) -> dict[str, Progress]:
        """Several writers' progress, by writer."""
        keys = {self.key("progress", w): w for w in writers}
        found = self.get_many(list(keys))
        return {w: Progress.from_item(found.get(k)) for k, w in keys.items()}

    def commit(
        self,
        writer: str,
        progress: Progress,
        attempt: str | None,
        state: dict[str, Any],
        *,
        done: bool,
    ) -> bool:
        """Commit a writer's next flush, written by ``attempt`` (its data records written
        already; ``None``: a commit of the state alone), with its new state: a conditional update
        that succeeds only if no other invocation committed since ``progress`` was read. Returns
        whether it did; on success ``progress`` is updated."""
        attempts = [*progress.attempts, *([attempt] if attempt is not None else [])]
        update = (
            Update()
            .set("attempts", {"S": ",".join(attempts)})
            .set("state", {"S": json.dumps(state, sort_keys=True)})
            .set("done", {"BOOL": done})
            .set("commits", {"N": str(progress.commits + 1)})
            .set(self.layout.ttl_attribute, self._expiry()[self.layout.ttl_attribute])
        )
        if progress.commits:
            update = update.where_equals("commits", {"N": str(progress.commits)})
        else:
            update = update.where_missing("commits")
        update = with_collection(update, self.layout, self.layout.control_pk)
        try:
            self.requests.send(
                "update_item",
                TableName=self.table_name,
                Key=self.layout.control_key(self.key("progress", writer)),
                **update.render(),
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        progress.attempts = attempts
        progress.state = state
        progress.done = done
        progress.commits += 1
        return True

    def data_key(
        self, kind: str, bucket: int, writer: str, index: int, attempt: str, chunk: int
    ) -> str:
        """The sort key text of a data record: chunk ``chunk`` of ``bucket``'s data (``kind``
        ``part``: amounts for a reducer; ``scanned`` or ``changed``: item entries for a join) in
        flush ``index`` of ``writer``, written by ``attempt``."""
        return self.key(kind, bucket, writer, index, attempt, chunk)

    def committed_keys(self, kind: str, bucket: int, writers: Mapping[str, Progress]) -> list[str]:
        """The sort keys of every committed data record of ``kind`` for ``bucket``, writer by
        writer (in the order given), flush by flush, chunk by chunk: a fixed order once the
        writers are done. Reads the first chunk's key of every committed flush (a missing one:
        the flush had no data for the bucket), 100 keys a request."""
        firsts = [
            self.data_key(kind, bucket, writer, index, attempt, 0)
            for writer, progress in writers.items()
            for index, attempt in enumerate(progress.attempts)
        ]
        keys: list[str] = []
        for offset in range(0, len(firsts), 100):
            chunk = firsts[offset : offset + 100]
            found = self.get_many(chunk)
            for first in chunk:
                item = found.get(first)
                if item is None:
                    continue
                base = first[: -len("#0")]
                keys.extend(f"{base}#{c}" for c in range(int(item["chunks"]["N"])))
        return keys

    def add_stats(self, **counts: int) -> None:
        """Add to the backfill's figures (``backfill#<id>#stats``, one ``ADD``): what
        ``aggregator status`` shows while it runs. Added after the commit they describe, so a
        task killed between the two leaves them short (the ``finish`` summary recounts them)."""
        update = Update()
        for name, value in counts.items():
            if value:
                update = update.add(name, Decimal(value))
        if not update.adds:
            return
        update = with_collection(update, self.layout, self.layout.control_pk)
        self.requests.send(
            "update_item",
            TableName=self.table_name,
            Key=self.layout.control_key(self.key("stats")),
            **update.render(),
        )

    # -- counting ------------------------------------------------------------------------------

    def contributions(self, image: Image | None) -> dict[AggregateRef, Amounts]:
        """What an image adds to the backfilled rules' aggregates (an image a rule cannot
        evaluate adds nothing to it, and is counted in :attr:`evaluation_failures`)."""
        found, failed = self.engine.image_entries(image, self.settings.rules, now=self.clock())
        self.evaluation_failures += len(failed)
        return found
