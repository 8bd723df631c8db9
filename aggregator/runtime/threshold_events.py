"""Send threshold crossings (:mod:`aggregator.core.crossings`) to Amazon EventBridge.

Each crossing becomes one event on the bus ``bus_name``: source ``ddb-aggregator``, detail type
``Aggregate threshold crossed``, time the record's creation time, and a detail::

    {"id": "9f2c...", "table": "social", "rule": "likes_per_post",
     "generation": "likes_per_post", "key": "POST#a91f", "threshold": "popular",
     "condition": "above 1000", "entered": true, "old_value": "999", "new_value": "1001",
     "sequence_number": "4000000000001234567890"}

plus ``granularity`` and ``bucket`` for a windowed rule's time bucket. Numbers are decimal text,
exactly as stored; ``old_value`` is ``null`` for the aggregate's first write (its item's
``INSERT``: there was no value before it). ``id`` (:func:`~aggregator.core.crossings.event_id`)
is the same on every delivery of the record: EventBridge gives each ``PutEvents`` entry an id
of its own, so consumers drop duplicates by ``detail.id``.

``PutEvents`` takes at most 10 entries a request (Amazon EventBridge API Reference,
"PutEvents": ``Entries``, 1 to 10 items; a request's entries total at most 256 KB, and each
entry here is under 2 KB: a rule name, a key of at most 1,024 bytes, numbers of at most 38
significant digits, at most 170 characters written out). A request can fail as a whole (an
exception) or per entry (``FailedEntryCount``, an ``ErrorCode`` on the entry: Amazon
EventBridge User Guide, "Sending events with PutEvents").
:meth:`ThresholdEvents.send` sends in stream order and stops at the first failure: the caller
asks Lambda to deliver the batch again from the failed crossing's record
(:class:`~aggregator.runtime.processor.StreamProcessor`), which sends it and the ones after it
again with the same ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from aggregator.core.crossings import Crossing, event_id

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

__all__ = [
    "DETAIL_TYPE",
    "EVENT_SOURCE",
    "MAX_ENTRIES_PER_REQUEST",
    "SendResult",
    "ThresholdEvents",
    "event_detail",
]

EVENT_SOURCE = "ddb-aggregator"
DETAIL_TYPE = "Aggregate threshold crossed"
MAX_ENTRIES_PER_REQUEST = 10
"""Entries in one ``PutEvents`` request (Amazon EventBridge API Reference, "PutEvents")."""


@dataclass
class SendResult:
    """What one :meth:`ThresholdEvents.send` did.

    Attributes
    ----------
    sent
        Events EventBridge accepted.
    requests
        ``PutEvents`` requests made.
    failed_from
        The sequence number of the first crossing not sent (its record, and every record after
        it, must be delivered again), or ``None``.
    errors
        Why, one line each.
    """

    sent: int = 0
    requests: int = 0
    failed_from: str | None = None
    errors: list[str] = field(default_factory=list)


def event_detail(table_name: str, crossing: Crossing) -> dict[str, Any]:
    """The event's ``detail`` (module docstring): a JSON object, ``old_value`` ``None``
    (``null``) for the aggregate's first write."""
    detail: dict[str, Any] = {
        "id": event_id(table_name, crossing),
        "table": table_name,
        "rule": crossing.rule,
        "generation": crossing.storage_name,
        "key": crossing.key,
        "threshold": crossing.threshold,
        "condition": crossing.condition,
        "entered": crossing.entered,
        "old_value": None if crossing.old_value is None else str(crossing.old_value),
        "new_value": str(crossing.new_value),
        "sequence_number": crossing.sequence_number,
    }
    if crossing.granularity is not None:
        detail["granularity"] = crossing.granularity
        detail["bucket"] = crossing.bucket
    return detail


class ThresholdEvents:
    """Puts crossings on an EventBridge bus (module docstring).

    Parameters
    ----------
    client
        A boto3 ``events`` client.
    table_name
        The table whose aggregates cross (in every event, and in the event ids).
    bus_name
        The event bus's name or ARN (``default``: the account's default bus).
    """

    def __init__(
        self, client: EventBridgeClient, table_name: str, bus_name: str = "default"
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.bus_name = bus_name

    def entry(self, crossing: Crossing) -> PutEventsRequestEntryTypeDef:
        """The ``PutEvents`` entry of one crossing."""
        entry: PutEventsRequestEntryTypeDef = {
            "Source": EVENT_SOURCE,
            "DetailType": DETAIL_TYPE,
            "Detail": json.dumps(event_detail(self.table_name, crossing), separators=(",", ":")),
            "EventBusName": self.bus_name,
        }
        if crossing.created is not None:
            entry["Time"] = datetime.fromtimestamp(int(crossing.created), UTC)
        return entry

    def send(self, crossings: Sequence[Crossing]) -> SendResult:
        """Send ``crossings`` in order, :data:`MAX_ENTRIES_PER_REQUEST` a request, up to the
        first that fails. Never raises for a failed request: see ``failed_from``."""
        result = SendResult()
        for start in range(0, len(crossings), MAX_ENTRIES_PER_REQUEST):
            chunk = crossings[start : start + MAX_ENTRIES_PER_REQUEST]
            result.requests += 1
            try:
                response = self.client.put_events(Entries=[self.entry(c) for c in chunk])
            except (ClientError, BotoCoreError) as exc:
                result.failed_from = chunk[0].sequence_number
                result.errors.append(f"PutEvents failed: {exc}")
                return result
            entries = response.get("Entries", [])
            for crossing, answer in zip(chunk, entries, strict=False):
                if "ErrorCode" in answer:
                    result.failed_from = crossing.sequence_number
                    result.errors.append(
                        f"PutEvents refused the event of {crossing.rule} {crossing.key} "
                        f"({crossing.threshold}): {answer.get('ErrorCode')} "
                        f"{answer.get('ErrorMessage', '')}".rstrip()
                    )
                    return result
                result.sent += 1
            if len(entries) < len(chunk):  # never, by the API's contract: say so rather than lose
                result.failed_from = chunk[len(entries)].sequence_number
                result.errors.append("PutEvents answered fewer entries than it was sent")
                return result
        return result
