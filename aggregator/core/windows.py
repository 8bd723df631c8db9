"""Time buckets: granularities, durations, event times and range planning (pure, no I/O).

A windowed rule keeps one aggregate item per key, granularity and bucket. Buckets are aligned to
the Unix epoch in UTC (a ``day`` starts at 00:00Z, an ``hour`` at :00, a ``300``-second bucket at
multiples of 300 s since 1970-01-01T00:00:00Z), and each bucket is named by its start in a
fixed-width text form, ``2013-01-01T05:00:00Z``, so buckets of one granularity sort as text in time
order and a Query with ``sk BETWEEN`` reads a contiguous time range.

All times here are whole **epoch seconds** (``int``); durations are seconds too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any, Literal

from aggregator.core.exceptions import EvaluationError, FailureCause
from aggregator.core.numbers import CONTEXT
from aggregator.core.text import MAX_QUOTED_CHARS, quote

__all__ = [
    "EVENT_TIME_UNITS",
    "Granularity",
    "RangePart",
    "bucket_text",
    "event_time_seconds",
    "format_duration",
    "parse_duration",
    "parse_instant",
    "plan_range",
]

EVENT_TIME_UNITS = ("epoch_seconds", "epoch_milliseconds", "iso8601")
"""How an event-time attribute is written: a number of seconds or milliseconds since
1970-01-01T00:00:00Z, or an ISO 8601 string with a UTC offset (``2013-01-01T05:00:00Z``,
``2013-01-01T00:00:00-05:00``)."""

EventTimeUnit = Literal["epoch_seconds", "epoch_milliseconds", "iso8601"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

NAMED_GRANULARITIES = {"minute": 60, "hour": 3600, "day": 86400}

# Fixed-width bucket text needs a four-digit year: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z.
MIN_EPOCH = -62135596800  # 0001-01-01T00:00:00Z
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z

MAX_DURATION = MAX_EPOCH - MIN_EPOCH + 1
"""Longest duration or granularity, in seconds: the whole span of bucket times (years
0001..9999). Anything longer means nothing, and checking before ``int()`` keeps a rule file's
``1E+999999999`` from building a billion-digit integer."""

_DURATION_PART = re.compile(r"([0-9]+)([smhd])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _plain(value: Any) -> str:
    """A number (or time text) for a message: as it is (``1E+20``) when short, else a bounded
    quote (:func:`aggregator.core.text.quote`), so an attribute of 250 KB never floods a message."""
    text = str(value)
    return text if len(text) <= MAX_QUOTED_CHARS else quote(text)


def parse_duration(value: Any) -> int:
    """A duration in whole seconds from ``"25h"``, ``"1h30m"``, ``"2d"``, ``"90s"`` or a number
    of seconds (``90000``).

    Raises
    ------
    ValueError
        For anything else, for zero and for negative durations, and for durations longer than
        :data:`MAX_DURATION` (years 0001..9999).
    """
    if isinstance(value, bool):
        raise ValueError(
            f"expected a duration such as '25h' or a number of seconds, got {quote(value)}"
        )
    if isinstance(value, int | Decimal):
        number = Decimal(value)
        if not number.is_finite() or number != number.to_integral_value() or number <= 0:
            raise ValueError(
                f"a duration in seconds must be a positive integer, got {_plain(value)}"
            )
        if number > MAX_DURATION:
            raise ValueError(_too_long(value))
        return int(number)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[0-9]+", text):
            return parse_duration(Decimal(text))
        parts = _DURATION_PART.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            seconds = sum(Decimal(n) * _DURATION_UNITS[u] for n, u in parts)
            if seconds > MAX_DURATION:
                raise ValueError(_too_long(value))
            if seconds > 0:
                return int(seconds)
    raise ValueError(
        f"expected a duration such as '25h', '1h30m', '2d', '90s' or a number of seconds, "
        f"got {quote(value)}"
    )


def _too_long(value: Any) -> str:
    shown = quote(value) if isinstance(value, str) else f"{_plain(value)} s"
    return f"{shown} is longer than the {MAX_DURATION} s from year 0001 to 9999"


def format_duration(seconds: int) -> str:
    """``90000`` -> ``"1d1h"``; the inverse of :func:`parse_duration` for its own output."""
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out) or "0s"


def bucket_text(epoch_seconds: int) -> str:
    """Fixed-width UTC text of an instant: ``1357016400`` -> ``"2013-01-01T05:00:00Z"``.

    Raises
    ------
    EvaluationError
        Outside years 0001..9999 (the text would no longer sort in time order).
    """
    if not MIN_EPOCH <= epoch_seconds <= MAX_EPOCH:
        raise EvaluationError(f"time {epoch_seconds} (epoch seconds) is outside years 0001..9999")
    d = EPOCH + timedelta(seconds=epoch_seconds)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}Z"


def parse_instant(text: str) -> int:
    """Epoch seconds (floored) of an ISO 8601 instant with a UTC offset.

    ``"2013-01-01T05:00:00Z"`` -> ``1357016400``; ``"2013-01-01T00:00:00-05:00"`` -> the same.
    Fractional seconds are floored.

    Raises
    ------
    EvaluationError
        For text that is not ISO 8601 or has no offset (a naive time is ambiguous).
    """
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise EvaluationError(f"{quote(text)} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise EvaluationError(
            f"{quote(text)} has no UTC offset; write a time with one, e.g. 2013-01-01T05:00:00Z or "
            "2013-01-01T00:00:00-05:00"
        )
    delta = moment - EPOCH
    return delta.days * 86400 + delta.seconds


def event_time_seconds(value: Any, unit: EventTimeUnit) -> int:
    """Epoch seconds (floored to a whole second) of an event-time attribute value.

    Parameters
    ----------
    value
        ``Decimal`` for the epoch units, ``str`` for ``iso8601`` (as images deserialize them).
    unit
        One of :data:`EVENT_TIME_UNITS`.

    Raises
    ------
    EvaluationError
        When the value's type does not fit the unit, or it is not a valid time in years
        0001..9999.
    """
    if unit == "iso8601":
        if not isinstance(value, str):
            raise EvaluationError(
                f"expected an ISO 8601 string, got {_kind(value)}", FailureCause.WRONG_TYPE
            )
        seconds = parse_instant(value)
    else:
        if not isinstance(value, Decimal) or not value.is_finite():
            raise EvaluationError(
                f"expected a number of {unit.split('_')[1]}, got {_kind(value)}",
                FailureCause.WRONG_TYPE,
            )
        # DynamoDB numbers have up to 38 digits: scale and floor in that context, not the
        # default 28-digit one (which could round up past a second boundary)
        scaled = value if unit == "epoch_seconds" else value.scaleb(-3, CONTEXT)
        try:
            seconds = int(scaled.to_integral_value(rounding=ROUND_FLOOR, context=CONTEXT))
        except (InvalidOperation, OverflowError):
            raise EvaluationError(f"{_plain(value)} is not a usable time") from None
    if not MIN_EPOCH <= seconds <= MAX_EPOCH:
        raise EvaluationError(f"time {_plain(value)} ({unit}) is outside years 0001..9999")
    return seconds


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


@dataclass(frozen=True, slots=True)
class Granularity:
    """A bucket size: ``minute``, ``hour``, ``day`` or a whole number of seconds.

    ``label`` goes into sort keys (``minute``, ``hour``, ``day``, or ``"<n>s"``); ``seconds`` is
    the size.
    """

    label: str
    seconds: int

    @classmethod
    def parse(cls, value: Any) -> Granularity:
        """``"hour"`` / ``"minute"`` / ``"day"`` / a positive number of seconds (``300`` or
        ``"300s"``).

        Raises
        ------
        ValueError
            For anything else, and for sizes over :data:`MAX_DURATION`.
        """
        if isinstance(value, Granularity):
            return value
        if isinstance(value, str) and value in NAMED_GRANULARITIES:
            return cls(value, NAMED_GRANULARITIES[value])
        if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]*s", value):
            return cls.parse(Decimal(value[:-1]))  # the label form, "300s"
        if isinstance(value, int | Decimal) and not isinstance(value, bool):
            number = Decimal(value)
            if number.is_finite() and number == number.to_integral_value() and number > 0:
                if number > MAX_DURATION:
                    raise ValueError(f"granularity {_too_long(value)}")
                seconds = int(number)
                for name, size in NAMED_GRANULARITIES.items():
                    if size == seconds:
                        return cls(name, size)
                return cls(f"{seconds}s", seconds)
        raise ValueError(
            f"granularity must be minute, hour, day or a positive whole number of seconds, "
            f"got {quote(value)}"
        )

    def start(self, epoch_seconds: int) -> int:
        """Start of the bucket holding ``epoch_seconds`` (floor, also for times before 1970)."""
        return epoch_seconds - epoch_seconds % self.seconds

    def ceil(self, epoch_seconds: int) -> int:
        """The first bucket boundary at or after ``epoch_seconds``."""
        return -((-epoch_seconds) // self.seconds) * self.seconds

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True, slots=True)
class RangePart:
    """Buckets of one granularity covering ``[start, end)`` (epoch seconds, aligned)."""

    granularity: Granularity
    start: int
    end: int

    @property
    def buckets(self) -> int:
        return (self.end - self.start) // self.granularity.seconds

    @property
    def first_bucket(self) -> int:
        return self.start

    @property
    def last_bucket(self) -> int:
        return self.end - self.granularity.seconds


def plan_range(granularities: Sequence[Granularity], start: int, end: int) -> list[RangePart]:
    """Cover ``[start, end)`` with as few buckets as the granularities allow.

    The coarsest granularity reads the whole buckets inside the range; the pieces left at each
    edge go to the next finer one, and so on. ``start`` and ``end`` must be boundaries of the
    finest granularity, and the granularities must nest (each size a multiple of every smaller
    one, which rule validation guarantees). With ``hour`` and ``minute``, any range is at most one
    run of hour buckets plus one run of minute buckets at each edge (at most 59 + 59 minutes).

    Returns
    -------
    list[RangePart]
        Non-empty, disjoint parts in time order whose union is exactly ``[start, end)``.

    Raises
    ------
    ValueError
        When an edge is not on a boundary of the finest granularity.
    """
    levels = sorted(granularities, key=lambda g: g.seconds, reverse=True)
    finest = levels[-1]
    for edge in (start, end):
        if edge % finest.seconds:
            raise ValueError(f"{edge} is not a {finest.label} boundary")
    if end <= start:
        return []

    def cover(lo: int, hi: int, index: int) -> list[RangePart]:
        if lo >= hi:
            return []
        level = levels[index]
        if index == len(levels) - 1:
            return [RangePart(level, lo, hi)]
        inner_lo, inner_hi = level.ceil(lo), level.start(hi)
        if inner_lo >= inner_hi:
            return cover(lo, hi, index + 1)
        return [
            *cover(lo, inner_lo, index + 1),
            RangePart(level, inner_lo, inner_hi),
            *cover(inner_hi, hi, index + 1),
        ]

    return cover(start, end, 0)
