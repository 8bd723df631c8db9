"""Time windows of a rule: the :class:`Window` model (event-time attribute, granularities,
retention) and the :class:`Bucket` of one windowed aggregate item."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from aggregator.core.conditions import MISSING
from aggregator.core.exceptions import EvaluationError, FailureCause
from aggregator.core.rules.messages import type_word
from aggregator.core.text import quote
from aggregator.core.windows import (
    EVENT_TIME_UNITS,
    EventTimeUnit,
    Granularity,
    bucket_text,
    event_time_seconds,
    parse_duration,
)

GranularityField = Annotated[Granularity, BeforeValidator(Granularity.parse)]

_SEVERAL = re.compile(r"[\s,;\[\]]")
"""What separates several granularities in one text: ``"hour, minute"``, ``"[hour, minute]"``."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """The time bucket of one windowed aggregate item.

    Attributes
    ----------
    granularity
        Its label: ``minute``, ``hour``, ``day`` or ``"<n>s"``.
    start
        Bucket start, epoch seconds (UTC-aligned).
    text
        ``start`` as fixed-width UTC text, ``2013-01-01T05:00:00Z`` (sorts in time order).
    expires
        The item's TTL, epoch seconds: bucket end plus the rule's retention; ``None`` when the
        rule keeps buckets forever.
    """

    granularity: str
    start: int
    text: str
    expires: int | None

    def suffix(self) -> str:
        """The sort-key suffix after the key: ``"<granularity>#<bucket start text>"``."""
        return f"{self.granularity}#{self.text}"

    def expired(self, now: float) -> bool:
        """Whether the bucket is past its retention at ``now`` (epoch seconds): its TTL is at or
        before ``now``, so DynamoDB may delete it at any moment."""
        return self.expires is not None and self.expires <= now


class Window(BaseModel):
    """Time bucketing of a rule: each matching item counts in one bucket per granularity.

    YAML::

        window:
          time: insertUtcTime          # the event-time attribute of the image
          unit: epoch_milliseconds     # epoch_seconds | epoch_milliseconds | iso8601
          granularities: [hour, minute]
          retention: 25h               # optional; "90m", "2d", "1h30m" or seconds

    Attributes
    ----------
    time
        Image attribute holding the event time.
    unit
        One of :data:`aggregator.core.windows.EVENT_TIME_UNITS`. ISO 8601 times need a UTC offset.
    granularities
        One or more bucket sizes (``minute``, ``hour``, ``day`` or whole seconds), finest last
        after validation sorts them coarsest first (one may be written alone, ``granularities:
        hour``, for ``[hour]``); each size must be a multiple of every smaller
        one so that window queries can combine them.
    retention
        Seconds a bucket is kept after its end: its items get ``ttl = bucket end + retention``
        (epoch seconds), and deltas aimed at a bucket past that are skipped and counted, never
        recreating an expired bucket. ``None``: buckets are kept forever.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    time: str = Field(min_length=1)
    unit: EventTimeUnit
    granularities: tuple[GranularityField, ...]
    retention: int | None = None

    @field_validator("unit", mode="before")
    @classmethod
    def _unit(cls, value: Any) -> Any:
        if value not in EVENT_TIME_UNITS:
            raise ValueError(
                f"unit must be one of {', '.join(EVENT_TIME_UNITS)}, got {quote(value)}"
            )
        return value

    @field_validator("granularities", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        """One granularity written alone (``granularities: hour``) is the list of it; text that
        holds several (``"hour, minute"``) is refused, pointing at the list."""
        if isinstance(value, bool) or not isinstance(value, str | int | Decimal):
            return value  # a list, or a type the tuple's own validation refuses
        if isinstance(value, str) and _SEVERAL.search(value.strip()):
            raise ValueError(
                f"expected a list such as [hour, minute], got {type_word(value)}; write each "
                "granularity as an item of a YAML list"
            )
        return [Granularity.parse(value)]  # its error names the field, not an item [0]

    @field_validator("granularities")
    @classmethod
    def _nested(cls, value: tuple[Granularity, ...]) -> tuple[Granularity, ...]:
        if not value:  # checked here: a min_length would repeat every item's own error
            raise ValueError("give at least one granularity, e.g. [hour, minute]")
        ordered = tuple(sorted(value, key=lambda g: g.seconds, reverse=True))
        sizes = [g.seconds for g in ordered]
        if len(set(sizes)) != len(sizes):
            raise ValueError("a granularity is listed twice")
        for coarse, fine in itertools.pairwise(ordered):
            if coarse.seconds % fine.seconds:
                raise ValueError(
                    f"{coarse.label} ({coarse.seconds} s) is not a multiple of {fine.label} "
                    f"({fine.seconds} s); window queries need nested buckets"
                )
        return ordered

    @field_validator("retention", mode="before")
    @classmethod
    def _retention(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @property
    def finest(self) -> Granularity:
        return self.granularities[-1]

    def granularity(self, label: str) -> Granularity:
        """The granularity called ``label``.

        Raises
        ------
        ValueError
            If the window has none of that name.
        """
        for g in self.granularities:
            if g.label == label:
                return g
        known = ", ".join(g.label for g in self.granularities)
        raise ValueError(f"no granularity {quote(label)}; this rule has {known}")

    def bucket(self, granularity: Granularity, start: int) -> Bucket:
        """The bucket of ``granularity`` starting at ``start`` (epoch seconds, aligned), with
        its TTL."""
        expires = None if self.retention is None else start + granularity.seconds + self.retention
        return Bucket(granularity.label, start, bucket_text(start), expires)

    def buckets(self, image: Mapping[str, Any]) -> list[Bucket]:
        """One bucket per granularity for an image's event time.

        Raises
        ------
        EvaluationError
            When the time attribute is missing or not a valid time in the declared unit.
        """
        value = image.get(self.time, MISSING)
        if value is MISSING:
            raise EvaluationError(
                f"time attribute {quote(self.time)} is missing", FailureCause.MISSING_ATTRIBUTE
            )
        try:
            seconds = event_time_seconds(value, self.unit)
        except EvaluationError as exc:
            raise EvaluationError(f"time attribute {quote(self.time)}: {exc}", exc.cause) from None
        return [self.bucket(g, g.start(seconds)) for g in self.granularities]
