"""A typed view over one DynamoDB stream record with lazily deserialized images (pure).

Input is a record as Lambda delivers it (``event["Records"][i]``)::

    {"eventID": "...", "eventName": "INSERT" | "MODIFY" | "REMOVE", "eventSource": "aws:dynamodb",
     "eventSourceARN": "arn:aws:dynamodb:...:table/T/stream/...",
     "dynamodb": {"Keys": {...}, "NewImage": {...}, "OldImage": {...},
                  "SequenceNumber": "111", "SizeBytes": 26,
                  "ApproximateCreationDateTime": 1479499740},          # epoch seconds
     "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}}  # TTL only

The local runner converts Streams API records (whose ``ApproximateCreationDateTime`` is a
``datetime``) into this shape.

Validation happens once, at the edge (:func:`parse_record`, :func:`parse_event`):

* the event must be a stream event (a mapping with a ``Records`` list whose records do not name
  another ``eventSource``), or :class:`~aggregator.core.exceptions.EventError` is raised:
  nothing in it could be dead-lettered;
* each record's envelope is checked with a pydantic model: ``eventName`` one of ``INSERT``,
  ``MODIFY``, ``REMOVE``; ``dynamodb`` a mapping with a ``SequenceNumber`` of 1 to 40 digits,
  ``Keys`` a mapping of key attributes typed ``S``, ``N`` or ``B``, images (when present) that
  are mappings. A record that fails becomes a
  :class:`MalformedRecord` (dead-lettered, never raised, never blocking the shard);
* attribute values are checked strictly when first read (:func:`deserialize_value`): a JSON
  object with exactly one known type tag, numbers that DynamoDB could store (so
  ``{"N": "NaN"}``, ``"Infinity"``, ``""`` and ``"abc"`` are errors with their true reason),
  base64 binaries, non-empty sets. Only the attributes some rule reads are ever deserialized, and
  the engine deserializes every attribute a rule reads before evaluating it, so a malformed
  value fails exactly the rules that read it, whatever the order of their tests; a malformed
  value no rule reads changes nothing. Powertools' deserializer is not used: it reads ``""`` as
  0 and ``{"S": 1}`` as 1.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from aggregator.core.conditions import dynamodb_number_problem
from aggregator.core.exceptions import EvaluationError, EventError, FailureCause
from aggregator.core.text import bound, quote

__all__ = [
    "SEQUENCE_NUMBER_WIDTH",
    "TTL_PRINCIPAL",
    "Image",
    "MalformedRecord",
    "StreamRecord",
    "deserialize_value",
    "json_digest",
    "pad_sequence_number",
    "parse_event",
    "parse_record",
    "record_digest",
    "record_json",
]

TTL_PRINCIPAL = "dynamodb.amazonaws.com"
"""``userIdentity.principalId`` of REMOVE records made by TTL (DynamoDB Developer Guide,
"DynamoDB Streams and Time to Live")."""

SEQUENCE_NUMBER_WIDTH = 40
"""Sequence numbers are numeric strings of 21 to 40 digits (DynamoDB Streams API reference,
``StreamRecord.SequenceNumber``); zero-padded to 40 they compare correctly as text."""

MAX_NESTING = 32
"""DynamoDB nests lists and maps at most 32 levels deep (Developer Guide, "Supported data types
and naming rules", Document types)."""

_SEQUENCE = re.compile(r"[0-9]{1,40}")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TAGS = ("S", "N", "B", "BOOL", "NULL", "L", "M", "SS", "NS", "BS")


def pad_sequence_number(sequence_number: str) -> str:
    """Zero-pad a sequence number to 40 digits so text order equals numeric order."""
    return sequence_number.zfill(SEQUENCE_NUMBER_WIDTH)


def _invalid(message: str, cause: FailureCause = FailureCause.INVALID_VALUE) -> EvaluationError:
    return EvaluationError(message, cause)


def _number(text: Any) -> Decimal:
    if not isinstance(text, str):
        raise _invalid(f"a number must be sent as a string, got {_kind(text)}")
    if not _NUMBER.fullmatch(text):
        raise _invalid(f"{quote(text)} is not a number")
    number = Decimal(text)
    problem = dynamodb_number_problem(number)
    if problem:
        raise _invalid(f"{quote(text)} is not a DynamoDB number: {bound(problem, 120)}")
    return number


def _binary(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if not isinstance(value, str):
        raise _invalid(f"a binary must be base64 text, got {_kind(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"{quote(value)} is not base64") from None


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _invalid(f"a string attribute holds {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def deserialize_value(value: Any, depth: int = 0) -> Any:
    """One attribute value from DynamoDB JSON, strictly.

    ``{"S": "a"}`` -> ``"a"``; ``{"N": "1.50"}`` -> ``Decimal("1.50")``; ``{"B": "AAE="}`` ->
    ``b"\\x00\\x01"`` (base64 text, or bytes as boto3 returns them); ``{"BOOL": true}``;
    ``{"NULL": true}`` -> ``None``; ``{"L": [...]}`` -> ``list``; ``{"M": {...}}`` -> ``dict``;
    ``{"SS"|"NS"|"BS": [...]}`` -> ``set`` (non-empty, as DynamoDB requires).

    Raises
    ------
    EvaluationError
        With cause ``invalid-value`` for anything DynamoDB could not have stored: not exactly
        one known type tag, a number that is not a finite DynamoDB number (``NaN``,
        ``Infinity``, ``""``, ``"abc"``, over 38 significant digits, out of range), a payload of
        the wrong JSON type, invalid base64, an empty set, nesting deeper than 32 levels. The
        message quotes at most a short prefix of the value.
    """
    if not isinstance(value, Mapping):
        raise _invalid(
            f'{quote(value)} is not DynamoDB JSON (expected an object such as {{"S": "text"}})'
        )
    if len(value) != 1:
        tags = ", ".join(map(repr, list(value)[:5]))
        raise _invalid(f"expected exactly one type tag, got {len(value)} ({tags})")
    ((tag, payload),) = value.items()
    scalar = _SCALARS.get(tag)
    if scalar is not None:
        return scalar(payload)
    if tag in ("L", "M"):
        return _document(tag, payload, depth)
    if tag in ("SS", "NS", "BS"):
        if not isinstance(payload, list) or not payload:
            raise _invalid(f"{tag} must be a non-empty list, got {quote(payload)}")
        element = {"SS": _string, "NS": _number, "BS": _binary}[tag]
        return {element(v) for v in payload}
    raise _invalid(f"unknown type tag {quote(tag)}; DynamoDB JSON uses {', '.join(_TAGS)}")


def _boolean(payload: Any) -> bool:
    if not isinstance(payload, bool):
        raise _invalid(f"BOOL holds {_kind(payload)}, not true or false")
    return payload


def _null(payload: Any) -> None:
    if payload is not True:
        raise _invalid(f"NULL must be true, got {quote(payload)}")


_SCALARS: dict[str, Callable[[Any], Any]] = {
    "S": _string,
    "N": _number,
    "B": _binary,
    "BOOL": _boolean,
    "NULL": _null,
}
"""Deserializers of the scalar type tags."""


def _document(tag: str, payload: Any, depth: int) -> list[Any] | dict[str, Any]:
    """An ``L`` or ``M`` payload at nesting ``depth``, its elements deserialized."""
    if depth >= MAX_NESTING:
        raise _invalid(f"nested deeper than DynamoDB's {MAX_NESTING} levels")
    if tag == "L":
        if not isinstance(payload, list):
            raise _invalid(f"L holds {_kind(payload)}, not a list")
        return [deserialize_value(v, depth + 1) for v in payload]
    if not isinstance(payload, Mapping):
        raise _invalid(f"M holds {_kind(payload)}, not an object")
    return {str(k): deserialize_value(v, depth + 1) for k, v in payload.items()}


class Image(Mapping[str, Any]):
    """Read-only mapping over a DynamoDB-JSON image, deserializing each attribute on first access.

    ``image["dep_delay"]`` -> ``Decimal("12")``; ``image.get("missing")`` -> ``None``.
    Values of type ``N`` become ``Decimal``, ``S`` ``str``, ``BOOL`` ``bool``, ``NULL`` ``None``,
    sets ``set``, ``L`` ``list``, ``M`` ``dict``, ``B`` ``bytes``.

    Raises
    ------
    EvaluationError
        On reading an attribute whose value is malformed (:func:`deserialize_value`); the message
        names the attribute.
    """

    __slots__ = ("_cache", "_raw")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = raw
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        try:
            return self._cache[name]
        except KeyError:
            pass
        raw = self._raw[name]  # KeyError when absent
        try:
            value = deserialize_value(raw)
        except EvaluationError as exc:
            raise EvaluationError(f"attribute {name!r}: {exc}", exc.cause) from None
        self._cache[name] = value
        return value

    def check(self, names: Iterable[str]) -> None:
        """Deserialize every attribute of ``names`` that is present, in the order given (pass
        them sorted for a deterministic reason).

        Raises
        ------
        EvaluationError
            For the first malformed one.
        """
        for name in names:
            if name in self._raw and name not in self._cache:
                self[name]

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    @property
    def raw(self) -> Mapping[str, Any]:
        """The DynamoDB-JSON attribute map as delivered."""
        return self._raw

    def __repr__(self) -> str:
        return f"Image({len(self._raw)} attributes)"


# -- the edge: envelope validation -------------------------------------------------------------

_AttributeMap = dict[str, Any]  # values are checked when a rule reads them


class _KeyValue(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    S: str | None = None
    N: str | None = None
    B: str | bytes | None = None

    @model_validator(mode="after")
    def _one_tag(self) -> _KeyValue:
        if sum(v is not None for v in (self.S, self.N, self.B)) != 1:
            raise ValueError("a key attribute needs exactly one type tag: S, N or B")
        return self


class _StreamData(BaseModel):
    model_config = ConfigDict(extra="allow")
    SequenceNumber: Annotated[str, StringConstraints(pattern=r"^[0-9]{1,40}$")]
    Keys: dict[str, _KeyValue]
    # absent is fine (the view type or the event decides), an explicit null is not; the model
    # only validates (StreamRecord reads the raw record), so the default is never read
    NewImage: _AttributeMap = Field(default_factory=dict)
    OldImage: _AttributeMap = Field(default_factory=dict)


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="allow")
    eventName: Literal["INSERT", "MODIFY", "REMOVE"]
    dynamodb: _StreamData
    userIdentity: dict[str, Any] | None = None
    eventID: str | None = None


def _problem(exc: ValidationError) -> str:
    """One line naming the first invalid part of a record and what it holds."""
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in err["loc"]) or "(record)"
    if err["type"] == "missing":
        return f"{where} is missing"
    if where == "dynamodb.SequenceNumber":
        return f"{where} must be a string of 1 to 40 digits, got {quote(err.get('input'))}"
    if where == "eventName":
        return f"{where} must be INSERT, MODIFY or REMOVE, got {quote(err.get('input'))}"
    return f"{where}: {err['msg']}, got {quote(err.get('input'), 24)}"


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):  # the Streams API's binaries; Lambda sends base64
        return base64.b64encode(value).decode("ascii")
    return str(value)  # Decimal, datetime


def record_json(raw: Any) -> str:
    """A record's canonical JSON text, in Lambda's shape (binaries as base64, keys sorted, no
    spaces): what a dead letter stores and what :func:`record_digest` hashes."""
    return json.dumps(raw, default=_json_default, sort_keys=True, separators=(",", ":"))


def json_digest(text: str) -> str:
    """SHA-256 (hex) of a JSON text from :func:`record_json`."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def record_digest(raw: Any) -> str:
    """SHA-256 (hex) of a record's canonical JSON (:func:`record_json`): identifies a record
    that is not stored whole."""
    return json_digest(record_json(raw))


@dataclass(frozen=True, slots=True)
class MalformedRecord:
    """A record of a stream event that cannot be read as a stream record.

    Attributes
    ----------
    raw
        What was delivered (any JSON value).
    reason
        One line, values quoted by prefix only.
    sequence_number
        Its ``dynamodb.SequenceNumber`` when that is a string of 1 to 40 digits, else ``None``
        (then the dead letter is keyed by :func:`record_digest`).
    event_id
        Its ``eventID`` when that is a string.
    """

    raw: Any
    reason: str
    sequence_number: str | None
    event_id: str | None


def parse_record(raw: Any) -> StreamRecord | MalformedRecord:
    """Validate one record's envelope (module docstring) and wrap it.

    Never raises: a record that fails is returned as a :class:`MalformedRecord`.
    """
    try:
        _Envelope.model_validate(raw)
    except ValidationError as exc:
        dynamodb = raw.get("dynamodb") if isinstance(raw, Mapping) else None
        sequence = dynamodb.get("SequenceNumber") if isinstance(dynamodb, Mapping) else None
        event_id = raw.get("eventID") if isinstance(raw, Mapping) else None
        return MalformedRecord(
            raw,
            bound(_problem(exc), 300),
            sequence if isinstance(sequence, str) and _SEQUENCE.fullmatch(sequence) else None,
            event_id if isinstance(event_id, str) else None,
        )
    return StreamRecord(raw, validated=True)


def parse_event(event: Any) -> list[StreamRecord | MalformedRecord]:
    """The records of a Lambda event for a DynamoDB stream, each validated.

    Raises
    ------
    EventError
        When ``event`` is not a DynamoDB stream event at all: not a mapping, no ``Records`` list,
        or a record naming another ``eventSource`` (an SQS or Kinesis event sent to the
        function by mistake).
    """
    if not isinstance(event, Mapping):
        raise EventError(f"not a DynamoDB stream event: the event is {_kind(event)}, not an object")
    records = event.get("Records", [] if "shardId" in event else None)
    if not isinstance(records, list):
        raise EventError(
            "not a DynamoDB stream event: no 'Records' list "
            f"(keys: {', '.join(map(str, list(event)[:8]))})"
        )
    for raw in records:
        source = raw.get("eventSource") if isinstance(raw, Mapping) else None
        if source is not None and source != "aws:dynamodb":
            raise EventError(
                f"not a DynamoDB stream event: a record comes from {quote(source)}; "
                "only aws:dynamodb records are processed"
            )
    return [parse_record(raw) for raw in records]


class StreamRecord:
    """One stream record (Lambda event shape) with a valid envelope. Cheap to build; images are
    lazy.

    Use :func:`parse_record` at the edge (it never raises); constructing directly validates too.

    Raises
    ------
    EvaluationError
        With cause ``malformed-record``, on construction, if the envelope is invalid (module
        docstring).
    """

    __slots__ = ("_new", "_old", "event_name", "raw", "sequence_number")

    def __init__(self, raw: Mapping[str, Any], *, validated: bool = False) -> None:
        if not validated:
            try:
                _Envelope.model_validate(raw)
            except ValidationError as exc:
                raise EvaluationError(_problem(exc), FailureCause.MALFORMED_RECORD) from None
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
        keys: Mapping[str, Mapping[str, Any]] = self.raw["dynamodb"].get("Keys", {})
        return keys

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
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal | str):
            return None
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            return None
        return number if number.is_finite() else None

    def __repr__(self) -> str:
        return f"StreamRecord({self.event_name} #{self.sequence_number} {dict(self.keys)!r})"
