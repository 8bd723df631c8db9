"""A typed view over one DynamoDB stream record with lazily deserialized images (pure).

Input is a record as Lambda delivers it (``event["Records"][i]``)::

    {"eventID": "...", "eventName": "INSERT" | "MODIFY" | "REMOVE", "eventSource": "aws:dynamodb",
     "eventSourceARN": "arn:aws:dynamodb:...:table/T/stream/...",
     "dynamodb": {"Keys": {...}, "NewImage": {...}, "OldImage": {...},
                  "SequenceNumber": "111", "SizeBytes": 26,
                  "ApproximateCreationDateTime": 1479499740},          # epoch seconds
     "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}}  # TTL only

The local runner converts Streams API records (whose ``ApproximateCreationDateTime`` is a
``datetime``) into this shape. Images deserialize one attribute at a time, on first access, with
Powertools' boto3-free deserializer (numbers become 38-digit ``Decimal``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from aws_lambda_powertools.shared.dynamodb_deserializer import TypeDeserializer

__all__ = ["SEQUENCE_NUMBER_WIDTH", "TTL_PRINCIPAL", "Image", "StreamRecord", "pad_sequence_number"]

TTL_PRINCIPAL = "dynamodb.amazonaws.com"
"""``userIdentity.principalId`` of REMOVE records made by TTL (DynamoDB Developer Guide,
"DynamoDB Streams and Time to Live")."""

SEQUENCE_NUMBER_WIDTH = 40
"""Sequence numbers are numeric strings of 21 to 40 digits (DynamoDB Streams API reference,
``StreamRecord.SequenceNumber``); zero-padded to 40 they compare correctly as text."""

_DESERIALIZER = TypeDeserializer()


def pad_sequence_number(sequence_number: str) -> str:
    """Zero-pad a sequence number to 40 digits so text order equals numeric order."""
    return sequence_number.zfill(SEQUENCE_NUMBER_WIDTH)


class Image(Mapping[str, Any]):
    """Read-only mapping over a DynamoDB-JSON image, deserializing each attribute on first access.

    ``image["dep_delay"]`` -> ``Decimal("12")``; ``image.get("missing")`` -> ``None``.
    Values of type ``N`` become ``Decimal``, ``S`` ``str``, ``BOOL`` ``bool``, ``NULL`` ``None``,
    sets ``set``, ``L`` ``list``, ``M`` ``dict``, ``B`` ``bytes``.
    """

    __slots__ = ("_cache", "_raw")

    def __init__(self, raw: Mapping[str, Mapping[str, Any]]) -> None:
        self._raw = raw
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        try:
            return self._cache[name]
        except KeyError:
            pass
        value = _DESERIALIZER.deserialize(self._raw[name])  # KeyError when absent
        self._cache[name] = value
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    @property
    def raw(self) -> Mapping[str, Mapping[str, Any]]:
        """The DynamoDB-JSON attribute map as delivered."""
        return self._raw

    def __repr__(self) -> str:
        return f"Image({dict(self._raw)!r})"


class StreamRecord:
    """One stream record (Lambda event shape). Cheap to build; images are lazy.

    Raises
    ------
    KeyError
        On construction, if the record lacks ``eventName`` or ``dynamodb.SequenceNumber``.
    """

    __slots__ = ("_new", "_old", "event_name", "raw", "sequence_number")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.event_name: str = raw["eventName"]
        self.sequence_number: str = raw["dynamodb"]["SequenceNumber"]
        self._new: Image | None = None
        self._old: Image | None = None

    @property
    def event_id(self) -> str | None:
        return self.raw.get("eventID")

    @property
    def keys(self) -> Mapping[str, Mapping[str, Any]]:
        """The primary key in DynamoDB JSON, e.g. ``{"pk": {"S": "A"}, "sk": {"S": "B"}}``."""
        return self.raw["dynamodb"].get("Keys", {})

    def key_string(self, attribute: str) -> str | None:
        """The string value of key attribute ``attribute`` (type ``S``), or ``None``."""
        value = self.keys.get(attribute)
        return value.get("S") if value else None

    @property
    def new_image(self) -> Image | None:
        """The item after the change (``None`` for REMOVE or when the view type lacks it)."""
        if self._new is None and "NewImage" in self.raw["dynamodb"]:
            self._new = Image(self.raw["dynamodb"]["NewImage"])
        return self._new

    @property
    def old_image(self) -> Image | None:
        """The item before the change (``None`` for INSERT or when the view type lacks it)."""
        if self._old is None and "OldImage" in self.raw["dynamodb"]:
            self._old = Image(self.raw["dynamodb"]["OldImage"])
        return self._old

    @property
    def is_ttl_delete(self) -> bool:
        """True for a REMOVE made by DynamoDB's TTL process."""
        identity = self.raw.get("userIdentity") or {}
        return (
            self.event_name == "REMOVE"
            and identity.get("type") == "Service"
            and identity.get("principalId") == TTL_PRINCIPAL
        )

    @property
    def approximate_creation_time(self) -> Decimal | None:
        """``ApproximateCreationDateTime`` in epoch seconds (``Decimal``), if present."""
        value = self.raw["dynamodb"].get("ApproximateCreationDateTime")
        return None if value is None else Decimal(str(value))

    def __repr__(self) -> str:
        return f"StreamRecord({self.event_name} #{self.sequence_number} {dict(self.keys)!r})"
